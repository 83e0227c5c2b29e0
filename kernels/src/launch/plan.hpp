// StagedLaunch's plan of one launch: per request, where its rows, slots, labels and features
// go (read in place, staged, or gathered on the host afterwards), and the byte sizes of the
// launch's two regions (in: row table and staged labels; out: indices, labels, counts and
// features), section by section. StagedLaunch carves its buffers and outputs from them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/kernels/launcher.hpp"
#include "gpusampler/kernels/staged_launch.hpp"

namespace gpusampler::kernels {

inline constexpr size_t kSection = 256;  // sections of the staging regions start 256-byte aligned
inline constexpr int64_t kPart = 16;     // a request's part of a section starts 16-byte aligned

// The rows section ends with a pipeline::LaunchSizes (16 bytes reserved): the row count that a
// size class's graph reads when it replays (StagedLaunch::RunDevice).
inline constexpr int64_t kSizesBytes = 16;

inline size_t Section(int64_t bytes) {
  return (static_cast<size_t>(std::max<int64_t>(0, bytes)) + kSection - 1) / kSection * kSection;
}
inline int64_t Part(int64_t bytes) { return (bytes + kPart - 1) / kPart * kPart; }

[[noreturn]] inline void Invalid(size_t request, const std::string& what) {
  throw Error(Error::Code::kInvalidArgument, "request " + std::to_string(request) + ": " + what);
}

// The byte sizes of a launch's two regions, section by section.
struct Regions {
  size_t rows = 0, labels = 0, tables = 0, scores = 0;  // in: row table, staged labels, class
                                                        // tables, staged scores
  size_t idx = 0, olab = 0, counts = 0, classes = 0, feat = 0;  // out: indices, labels,
                                                                // 2 x counts, num_per_class,
                                                                // features
  size_t in() const { return rows + labels + tables + scores; }
  size_t out() const { return idx + olab + 2 * counts + classes + feat; }
  size_t classes_at() const { return idx + olab + 2 * counts; }
  size_t feat_at() const { return classes_at() + classes; }
};

struct LaunchPlan {
  int64_t num_rows = 0;
  int64_t total_elements = 0;
  int64_t total_slots = 0;
  int64_t max_length = 0;
  int64_t max_samples = 0;
  int64_t staged_label_bytes = 0;  // labels uploaded from the host
  int64_t out_label_bytes = 0;
  int64_t out_feature_bytes = 0;   // features the kernels write
  int64_t host_feature_bytes = 0;  // features gathered on the host afterwards
  bool any_classes = false;        // some request has spec.classes (BatchBuilder rows)
  int64_t class_table_bytes = 0;
  int64_t total_scores = 0;
  int64_t total_class_outputs = 0;
  struct Request {
    int64_t first_row = 0;
    int64_t first_slot = 0;
    const uint8_t* in_place_labels = nullptr;    // read where they are; null: staged
    int64_t stage_at = -1;                       // byte offset in the staged labels
    const uint8_t* in_place_features = nullptr;  // written by the kernels from here
    int64_t out_label_at = 0;
    int64_t out_feature_at = -1;   // in the kernels' feature output; -1: none
    int64_t host_feature_at = -1;  // in the host-gathered features; -1: none
    // LaunchRequest::features_out, when the features are written there (by a host backend's
    // kernels, or by the host gather): then out_feature_at and host_feature_at are -1.
    uint8_t* features_out = nullptr;
  };
  std::vector<Request> requests;
  Regions regions;
};

// Checks request j, adds its rows, elements and slots to the plan, and says where its labels
// and features come from. Throws Error(kInvalidArgument) for a bad request.
void PlanRequest(size_t j, const LaunchRequest& q, bool device, LaunchPlan* plan);
// The sections of the launch's two regions for the planned totals.
void SizeRegions(LaunchPlan* plan);
// The regions that hold any launch of at most `sizes` (StagedLaunch::Reserve).
Regions RegionsFor(const StagedSizes& sizes);
// Launch sizes of the CUDA launcher for these regions and counts.
LaunchSizes SizesOf(const Regions& r, int64_t rows, int64_t elements, int64_t slots,
                    int64_t class_pairs);

}  // namespace gpusampler::kernels
