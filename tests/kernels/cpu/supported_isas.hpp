// The instruction-set versions of the CPU backend this CPU runs (portable always), for the
// cpu/ tests that check every version.
#pragma once

#include <vector>

#include "cpu/isa.hpp"

namespace gpusampler::kernels::cpu {

inline std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

}  // namespace gpusampler::kernels::cpu
