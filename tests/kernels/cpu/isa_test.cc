// cpu/isa: instruction-set names, the version in use, and the default choice per CPU family.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/key_tiles.hpp"

namespace gpusampler::kernels::cpu {
namespace {

TEST(IsaTest, IsaNamesParseAndTheActiveOneIsSupported) {
  for (Isa isa : kAllIsas) {
    Isa parsed;
    ASSERT_TRUE(ParseIsa(IsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  Isa parsed;
  EXPECT_FALSE(ParseIsa("sse2", &parsed));
  EXPECT_TRUE(IsaSupported(Isa::kPortable));
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
  EXPECT_STREQ(KeyIsaName(), IsaName(ActiveIsa()));
  // GPUSAMPLER_PHILOX_ISA (ctest's kernels_isa_* entries) wins when this CPU supports it.
  const char* env = std::getenv("GPUSAMPLER_PHILOX_ISA");
  Isa wanted;
  if (env != nullptr && ParseIsa(env, &wanted) && IsaSupported(wanted)) {
    EXPECT_EQ(ActiveIsa(), wanted) << IsaChoice();
  } else {
    const CpuId cpu = DetectCpu();
    EXPECT_EQ(ActiveIsa(), DefaultIsa(cpu, IsaSupported(Isa::kAvx2), IsaSupported(Isa::kAvx512)))
        << IsaChoice();
  }
}

TEST(IsaTest, DefaultIsaIsTheWidestOnBothFamilies) {
  const CpuId intel{"GenuineIntel", 6, 0x8F};   // Sapphire Rapids
  const CpuId amd{"AuthenticAMD", 0x19, 0x11};  // Zen 4 (Genoa)
  for (const CpuId& cpu : {intel, amd}) {
    EXPECT_EQ(DefaultIsa(cpu, true, true), Isa::kAvx512) << cpu.vendor;
    EXPECT_EQ(DefaultIsa(cpu, true, false), Isa::kAvx2) << cpu.vendor;
    EXPECT_EQ(DefaultIsa(cpu, false, false), Isa::kPortable) << cpu.vendor;
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
