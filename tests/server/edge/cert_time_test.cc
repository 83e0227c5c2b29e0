// Issue 31 (transport): an expired (or not yet valid) server certificate is named at start
// and on rotation (CertificateTimeProblem); certificates are made here with OpenSSL so that
// their validity can lie in the past.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "edge/security.hpp"

namespace gpusampler::server {
namespace {

// A self-signed P-256 certificate valid from now + from_s to now + to_s, as PEM.
std::string MakeCert(long from_s, long to_s) {
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, void (*)(X509*)> cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_s);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  EXPECT_GT(X509_sign(cert.get(), key.get(), EVP_sha256()), 0);
  std::unique_ptr<BIO, int (*)(BIO*)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_X509(bio.get(), cert.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

TEST(CertTimeTest, ValidCertificateHasNoProblem) {
  EXPECT_EQ(CertificateTimeProblem(MakeCert(-3600, 3600)), "");
}

TEST(CertTimeTest, ExpiredCertificateIsNamed) {
  const std::string why = CertificateTimeProblem(MakeCert(-7200, -3600));
  EXPECT_NE(why.find("the certificate expired at "), std::string::npos) << why;
  EXPECT_NE(why.find("GMT"), std::string::npos) << why;
}

TEST(CertTimeTest, NotYetValidCertificateIsNamed) {
  const std::string why = CertificateTimeProblem(MakeCert(3600, 7200));
  EXPECT_NE(why.find("not valid before"), std::string::npos) << why;
}

TEST(CertTimeTest, OnlyTheLeafCounts) {
  // The chain's first certificate is the server's; an expired one after it is not named here.
  EXPECT_EQ(CertificateTimeProblem(MakeCert(-3600, 3600) + MakeCert(-7200, -3600)), "");
  EXPECT_EQ(CertificateTimeProblem("not a certificate"), "");
}

}  // namespace
}  // namespace gpusampler::server
