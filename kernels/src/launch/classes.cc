// CompileClassTable and LowerToBinary (classes.hpp): the host side of SPEC section 7's class
// specs. Every check of a spec that does not depend on the row is here, once per request.
#include "gpusampler/kernels/classes.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  throw Error(Error::Code::kInvalidArgument, what);
}

std::string ClassName(size_t c) { return "classes[" + std::to_string(c) + "]"; }

std::string RangeText(const LabelRange& r) {
  return "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
}

std::string Num(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

// A merged range and the first of the class's wire ranges it came from (for messages).
struct Merged {
  LabelRange range;
  int32_t cls;
  int32_t first_wire;
};

}  // namespace

void CompileClassTable(const std::vector<ClassSpec>& classes,
                       const std::vector<int32_t>& fill_order, int64_t k,
                       std::vector<uint8_t>* out) {
  const size_t num_classes = classes.size();
  if (num_classes == 0 || num_classes > static_cast<size_t>(kMaxClasses)) {
    Fail("classes: " + std::to_string(num_classes) + " classes; a spec with classes has 1 to " +
         std::to_string(kMaxClasses));
  }
  size_t wire_ranges = 0;
  for (const ClassSpec& spec : classes) wire_ranges += spec.labels.size();
  if (wire_ranges > static_cast<size_t>(kMaxClassRanges)) {
    Fail("classes: " + std::to_string(wire_ranges) + " label ranges in all; at most " +
         std::to_string(kMaxClassRanges));
  }

  uint32_t flags = 0;
  std::vector<ClassEntry> entries(num_classes);
  std::vector<Merged> merged;
  int64_t sum = 0;  // of the targets other than rest's; each is in [0, K] when added
  int rest = -1;
  for (size_t c = 0; c < num_classes; ++c) {
    const ClassSpec& spec = classes[c];
    const std::string name = ClassName(c);
    if (spec.labels.empty()) Fail(name + ".labels: a class needs at least one label range");
    std::vector<Merged> own;
    for (size_t j = 0; j < spec.labels.size(); ++j) {
      const LabelRange& r = spec.labels[j];
      if (r.lo > r.hi) {
        Fail(name + ".labels[" + std::to_string(j) + "]: lo " + std::to_string(r.lo) + " > hi " +
             std::to_string(r.hi));
      }
      own.push_back({r, static_cast<int32_t>(c), static_cast<int32_t>(j)});
    }
    std::sort(own.begin(), own.end(),
              [](const Merged& a, const Merged& b) { return a.range.lo < b.range.lo; });
    // Overlapping or adjacent ranges of one class become one (hi + 1 cannot overflow when
    // hi < lo of the next, which is at most INT64_MAX).
    const size_t class_begin = merged.size();
    for (const Merged& m : own) {
      if (merged.size() > class_begin &&
          (m.range.lo <= merged.back().range.hi || m.range.lo - 1 == merged.back().range.hi)) {
        merged.back().range.hi = std::max(merged.back().range.hi, m.range.hi);
      } else {
        merged.push_back(m);
      }
    }

    ClassEntry& entry = entries[c];
    std::memset(&entry, 0, sizeof entry);
    const auto selection = static_cast<int32_t>(spec.selection);
    if (selection < 1 || selection > 4) {
      Fail(name + ".selection " + std::to_string(selection) + " is not UNIFORM, WEIGHTED, " +
           "HARDEST or MIXED");
    }
    entry.selection = selection;
    if (spec.selection != Selection::kUniform) flags |= kClassesNeedScores;
    if (spec.selection == Selection::kWeighted) flags |= kClassesWeighted;
    if (spec.selection == Selection::kHardest || spec.selection == Selection::kMixed) {
      flags |= kClassesRanked;
    }
    if (spec.selection == Selection::kMixed) {
      if (!spec.has_hard_fraction) Fail(name + ".hard_fraction: a MIXED class needs hard_fraction");
      if (!(spec.hard_fraction >= 0.0 && spec.hard_fraction <= 1.0)) {
        Fail(name + ".hard_fraction " + Num(spec.hard_fraction) + " outside [0, 1]");
      }
      entry.hard_fraction = spec.hard_fraction;
    }

    switch (spec.share) {
      case Share::kCount:
        if (spec.count < 0) Fail(name + ".count " + std::to_string(spec.count) + " < 0");
        if (spec.count > k) {
          Fail(name + ".count " + std::to_string(spec.count) + " > num_samples " +
               std::to_string(k));
        }
        entry.target = spec.count;
        break;
      case Share::kFraction:
        if (!(spec.fraction >= 0.0 && spec.fraction <= 1.0)) {
          Fail(name + ".fraction " + Num(spec.fraction) + " outside [0, 1]");
        }
        entry.target = TargetPositives(k, spec.fraction);
        break;
      case Share::kRest:
        if (rest >= 0) {
          Fail(name + ".rest: " + ClassName(static_cast<size_t>(rest)) +
               " is rest already; at most one class is rest");
        }
        rest = static_cast<int>(c);
        break;
      case Share::kNone:
      default:
        Fail(name + ": no share; set exactly one of count, fraction or rest");
    }
    if (spec.share != Share::kRest) {
      sum += entry.target;
      if (sum > k) {
        Fail("classes: the targets of classes[0.." + std::to_string(c) + "] sum to " +
             std::to_string(sum) + " > num_samples " + std::to_string(k));
      }
    }
  }
  if (rest >= 0) entries[static_cast<size_t>(rest)].target = k - sum;

  // Different classes must not overlap: sort every merged range by lo; a range that starts
  // at or before the end of the one before it overlaps it (ranges of one class are disjoint).
  std::sort(merged.begin(), merged.end(),
            [](const Merged& a, const Merged& b) { return a.range.lo < b.range.lo; });
  for (size_t j = 1; j < merged.size(); ++j) {
    const Merged& a = merged[j - 1];
    const Merged& b = merged[j];
    if (b.range.lo <= a.range.hi) {
      const Merged& first = a.cls < b.cls ? a : b;
      const Merged& second = a.cls < b.cls ? b : a;
      const auto& fa =
          classes[static_cast<size_t>(first.cls)].labels[static_cast<size_t>(first.first_wire)];
      const auto& fb =
          classes[static_cast<size_t>(second.cls)].labels[static_cast<size_t>(second.first_wire)];
      Fail(ClassName(static_cast<size_t>(first.cls)) + " and " +
           ClassName(static_cast<size_t>(second.cls)) + " overlap: labels " + RangeText(fa) +
           " and " + RangeText(fb) + " share [" + std::to_string(b.range.lo) + ", " +
           std::to_string(std::min(a.range.hi, b.range.hi)) + "]");
    }
  }

  std::vector<bool> seen(num_classes, false);
  std::vector<size_t> where(num_classes, 0);
  for (size_t j = 0; j < fill_order.size(); ++j) {
    const int32_t c = fill_order[j];
    if (c < 0 || static_cast<size_t>(c) >= num_classes) {
      Fail("fill_order[" + std::to_string(j) + "] = " + std::to_string(c) +
           " is not a class index in [0, " + std::to_string(num_classes) + ")");
    }
    if (seen[static_cast<size_t>(c)]) {
      Fail("fill_order[" + std::to_string(j) + "] = " + std::to_string(c) +
           " appears twice (also fill_order[" + std::to_string(where[static_cast<size_t>(c)]) +
           "])");
    }
    seen[static_cast<size_t>(c)] = true;
    where[static_cast<size_t>(c)] = j;
  }

  const auto nc = static_cast<int32_t>(num_classes);
  const auto nr = static_cast<int32_t>(merged.size());
  const auto nf = static_cast<int32_t>(fill_order.size());
  out->assign(static_cast<size_t>(ClassTableBytes(nc, nr, nf)), 0);
  uint8_t* p = out->data();
  ClassTableHeader header{nc, nr, nf, flags};
  std::memcpy(p, &header, sizeof header);
  p += sizeof header;
  for (const Merged& m : merged) {
    ClassRange r{m.range.lo, m.range.hi, m.cls, 0};
    std::memcpy(p, &r, sizeof r);
    p += sizeof r;
  }
  std::memcpy(p, entries.data(), sizeof(ClassEntry) * num_classes);
  p += sizeof(ClassEntry) * num_classes;
  if (nf > 0) std::memcpy(p, fill_order.data(), sizeof(int32_t) * fill_order.size());
}

bool LowerToBinary(const std::vector<ClassSpec>& classes, const std::vector<int32_t>& fill_order,
                   SamplingSpec* binary, int32_t* positive_class) {
  if (classes.size() != 2) return false;
  for (const ClassSpec& spec : classes) {
    if (spec.selection != Selection::kUniform || spec.labels.size() != 1 ||
        spec.labels[0].lo != spec.labels[0].hi) {
      return false;
    }
  }
  int32_t pos = -1;
  if (classes[0].share == Share::kFraction && classes[1].share == Share::kRest) pos = 0;
  if (classes[1].share == Share::kFraction && classes[0].share == Share::kRest) pos = 1;
  if (pos < 0) return false;
  const int32_t neg = 1 - pos;
  const int64_t p = classes[static_cast<size_t>(pos)].labels[0].lo;
  const int64_t q = classes[static_cast<size_t>(neg)].labels[0].lo;
  if (p == q) return false;
  FillPolicy fill;
  if (fill_order.empty()) {
    fill = FillPolicy::kNone;
  } else if (fill_order.size() == 1 && fill_order[0] == neg) {
    fill = FillPolicy::kNegativesOnly;
  } else if (fill_order.size() == 2 && fill_order[0] == neg && fill_order[1] == pos) {
    fill = FillPolicy::kBoth;
  } else {
    return false;
  }
  binary->positive_fraction = classes[static_cast<size_t>(pos)].fraction;
  binary->positive_label = p;
  binary->negative_label = q;
  binary->fill = fill;
  *positive_class = pos;
  return true;
}

}  // namespace gpusampler::kernels
