// When the CUDA backend's scratch arena may grow. Host-only and CUDA-free so that the rule is
// tested on every machine (tests/kernels/cuda/arena_policy_test.cc); cuda_backend.cu applies it.
//
// A Sample() call captured into a CUDA graph bakes the arena's addresses into the graph.
// Growing the arena frees the old block, so replaying such a graph afterwards would read and
// write freed memory. The rule: once a capture has used the arena, growth is refused until
// the caller says that every such graph is gone (Backend::ReleaseGraphs). Not thread-safe
// (one backend, one caller).
#pragma once

#include <cstdint>
#include <string>

namespace gpusampler::kernels::detail {

// Element counts the arena is sized for.
struct Capacity {
  int64_t rows = 0;      // B + 1
  int64_t elements = 0;  // total_elements
  int64_t slots = 0;     // total_slots
  int64_t temp_bytes = 0;
};

// The arena's next size when `want` bytes do not fit in `have`: at least half as much again, so
// that a run of growing launches reallocates O(log) times. CudaBackend and cuda-sim's stream
// backend both grow by this rule, so that a reservation is exactly as short on one as on the
// other.
inline int64_t GrowArenaBytes(int64_t have, int64_t want) {
  return want <= have ? have : (want > have + have / 2 ? want : have + have / 2);
}

inline bool Holds(const Capacity& have, const Capacity& need) {
  return need.rows <= have.rows && need.elements <= have.elements && need.slots <= have.slots &&
         need.temp_bytes <= have.temp_bytes;
}

class ArenaPolicy {
 public:
  enum class Decision { kFits, kGrow, kRefused };

  // Whether a launch needing `need` may run with the arena holding `have`. `capturing`: the
  // stream is being captured now. A capture that fits is remembered (the graph now refers to
  // the arena); `why` is set when the answer is kRefused.
  Decision Check(const Capacity& have, const Capacity& need, bool capturing, std::string* why) {
    if (Holds(have, need)) {
      if (capturing) captured_ = true;
      return Decision::kFits;
    }
    if (capturing) {
      *why =
          "scratch space must grow, which is not allowed during stream capture; Reserve() "
          "sizes at least as large before capturing";
      return Decision::kRefused;
    }
    if (captured_) {
      *why =
          "scratch space must grow, but a captured CUDA graph refers to it (growing would "
          "free memory the graph uses); destroy the graphs and call ReleaseGraphs() first";
      return Decision::kRefused;
    }
    return Decision::kGrow;
  }

  // Every graph captured so far has been destroyed: the arena may move again.
  void ReleaseGraphs() { captured_ = false; }
  bool captured() const { return captured_; }

 private:
  bool captured_ = false;
};

}  // namespace gpusampler::kernels::detail
