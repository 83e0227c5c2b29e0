// datasets' Sha256 (the digest every dataset reports): the FIPS 180 test vectors, also fed
// in uneven pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "datasets/datasets.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(Sha256Test, Fips180Vectors) {
  auto hex = [](const std::string& s) {
    Sha256 h;
    h.Update(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    return h.HexDigest();
  };
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Fed in uneven pieces: the same digest.
  const std::string million(1000000, 'a');
  Sha256 h;
  for (size_t at = 0; at < million.size(); at += 777) {
    h.Update(reinterpret_cast<const uint8_t*>(million.data()) + at,
             std::min<size_t>(777, million.size() - at));
  }
  EXPECT_EQ(h.HexDigest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// A copy hashes on from where the original was (the builder copies its label hash to add
// the feature and score bytes), and neither disturbs the other.
TEST(Sha256Test, ACopyContinuesFromWhereTheOriginalIs) {
  const auto* ab = reinterpret_cast<const uint8_t*>("ab");
  const auto* c = reinterpret_cast<const uint8_t*>("c");
  const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  Sha256 a;
  a.Update(ab, 2);
  Sha256 b = a;
  Sha256 d;
  d = a;
  b.Update(c, 1);
  d.Update(c, 1);
  a.Update(c, 1);
  EXPECT_EQ(b.HexDigest(), abc);
  EXPECT_EQ(a.HexDigest(), abc);
  EXPECT_EQ(d.HexDigest(), abc);
  Sha256 empty;
  empty.Update(nullptr, 0);  // an empty chunk's null data
  EXPECT_EQ(empty.HexDigest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace gpusampler::server::testing
