// The CPU backend's instruction-set versions (portable, AVX2, AVX-512): what this CPU
// supports (CPUID) and which version the bulk functions use. Not part of the public API.
#pragma once

#include <string>

namespace gpusampler::kernels::cpu {

// The instruction-set versions of the bulk functions below. Every version computes the same
// results; ActiveIsa() is the one the unqualified functions use.
enum class Isa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr Isa kAllIsas[] = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};

const char* IsaName(Isa isa);  // "portable", "avx2", "avx512"
bool ParseIsa(const std::string& name, Isa* isa);
// Whether this CPU (and build) can run `isa`.
bool IsaSupported(Isa isa);

// Of one function table per version (null: not built, as off x86-64 GCC), the widest that
// `isa` allows and this CPU runs; the portable one otherwise.
template <class Fns>
const Fns& ChooseByIsa(Isa isa, const Fns& portable, const Fns* avx2, const Fns* avx512) {
  if (avx512 != nullptr && isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512)) return *avx512;
  if (avx2 != nullptr && isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2)) return *avx2;
  return portable;
}

// The CPU as CPUID reports it: vendor string ("GenuineIntel", "AuthenticAMD", ...) and the
// display family and model (base + extended fields).
struct CpuId {
  std::string vendor;
  int family = 0;
  int model = 0;
};
CpuId DetectCpu();

// The version chosen for a CPU by default: the widest supported. (The per-family reasoning
// and its measurements are in docs/decisions.md K3: after the compress-to-register change,
// AVX-512 is the fastest version on both Intel Sapphire Rapids and AMD Zen 4.)
Isa DefaultIsa(const CpuId& cpu, bool has_avx2, bool has_avx512);

// The version in use, chosen once: GPUSAMPLER_PHILOX_ISA=portable|avx2|avx512 when set and
// supported, else DefaultIsa for this CPU. IsaChoice() says why, in words (for logs and the
// bench's JSON).
Isa ActiveIsa();
const char* IsaChoice();

}  // namespace gpusampler::kernels::cpu
