#include "cpu/isa.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace gpusampler::kernels::cpu {
namespace {

struct Choice {
  Isa isa = Isa::kPortable;
  std::string why;
};

const Choice& ActiveChoice() {
  static const Choice choice = [] {
    Choice c;
    const CpuId cpu = DetectCpu();
    const Isa best = DefaultIsa(cpu, IsaSupported(Isa::kAvx2), IsaSupported(Isa::kAvx512));
    char family[64];
    std::snprintf(family, sizeof(family), " family 0x%x model 0x%x", cpu.family, cpu.model);
    const std::string default_why = "default for " + cpu.vendor + family;
    const char* env = std::getenv("GPUSAMPLER_PHILOX_ISA");
    Isa wanted;
    if (env == nullptr || *env == '\0') {
      c.isa = best;
      c.why = default_why;
    } else if (!ParseIsa(env, &wanted)) {
      c.isa = best;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env + " is not portable, avx2 or avx512; " +
              default_why;
    } else if (!IsaSupported(wanted)) {
      c.isa = best;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env + " is not supported by this CPU; " +
              default_why;
    } else {
      c.isa = wanted;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env;
    }
    return c;
  }();
  return choice;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool ParseIsa(const std::string& name, Isa* isa) {
  for (Isa candidate : kAllIsas) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

bool IsaSupported(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  }();
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return avx2 && __builtin_cpu_supports("avx512f");
  }();
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    default:
      return true;
  }
#else
  return isa == Isa::kPortable;
#endif
}

CpuId DetectCpu() {
  CpuId id;
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13];
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    vendor[12] = '\0';
    id.vendor = vendor;
  }
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    const int base_family = static_cast<int>((eax >> 8) & 0xF);
    const int base_model = static_cast<int>((eax >> 4) & 0xF);
    id.family =
        base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
    id.model = (base_family == 0x6 || base_family == 0xF)
                   ? base_model + (static_cast<int>((eax >> 16) & 0xF) << 4)
                   : base_model;
  }
#endif
  if (id.vendor.empty()) id.vendor = "unknown";
  return id;
}

Isa DefaultIsa(const CpuId& cpu, bool has_avx2, bool has_avx512) {
  (void)cpu;
  if (has_avx512) return Isa::kAvx512;
  if (has_avx2) return Isa::kAvx2;
  return Isa::kPortable;
}

Isa ActiveIsa() { return ActiveChoice().isa; }
const char* IsaChoice() { return ActiveChoice().why.c_str(); }

}  // namespace gpusampler::kernels::cpu
