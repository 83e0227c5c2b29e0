#include "test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/staged_launch.hpp"
#include "sim/sim_backend.hpp"

namespace gpusampler::kernels::testing {

uint8_t FeatureByte(uint32_t r, int64_t i, int64_t b) {
  uint64_t x = (uint64_t{r} << 40) ^ (static_cast<uint64_t>(i) << 8) ^ static_cast<uint64_t>(b);
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<uint8_t>((x >> 56) | 1);  // never 0, so padding is distinguishable
}

std::vector<std::string> AllBackends() {
  return {"cpu:1",   "cpu:3",        "cpusplit:3",    "cpumiss:2",
          "cudasim", "cudasimlarge", "cudasimdevice", "cuda"};
}

bool BackendAvailable(const std::string& backend) {
  if (backend == "cuda") return CudaDeviceCount() > 0;
  return true;
}

namespace {

void EncodeLabel(DType dtype, int64_t v, uint8_t* dst) {
  const size_t item = DTypeSize(dtype);
  std::memcpy(dst, &v, item);  // little-endian: the low bytes
}

int64_t DecodeLabel(DType dtype, const uint8_t* src) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
      return *src;
    case DType::kInt8:
      return static_cast<int8_t>(*src);
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, src, 2);
      return v;
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, src, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, src, 8);
      return v;
    }
  }
}

// "cpu:T": the production CPU backend with T threads. "cpusplit:T" splits every row of 64
// or more elements over the threads. "cpumiss:T" uses a candidate bound below the quota,
// so most selections take the exact rerun path.
std::unique_ptr<Backend> MakeBackend(const std::string& name) {
  if (name == "cuda") return MakeCudaBackend(0);
  // The CUDA pipeline on the host. "cudasimlarge" sends every row through the large-row
  // stages and lets a block sort only 64 keys, so small tests take the paths that only huge
  // rows take on the device (boundary histogram rounds, the large-bucket ranking).
  if (name == "cudasim") return MakeCudaSimBackend();
  // The cuda-sim *device*: "device" memory, a stream, Sample() enqueued like CUDA's; the
  // inputs are staged and the outputs read back with device.hpp's copies, as for "cuda".
  if (name == "cudasimdevice") return MakeCudaBackend(kSimDevice);
  if (name == "cudasimlarge") {
    CudaSimOptions options;
    options.block_capacity = 64;
    options.small_row_max = 0;
    return MakeCudaSimBackend(options);
  }
  const auto colon = name.find(':');
  if (colon == std::string::npos) throw std::invalid_argument("unknown backend " + name);
  CpuBackendOptions options;
  options.threads = std::stoi(name.substr(colon + 1));
  const std::string kind = name.substr(0, colon);
  if (kind == "cpusplit") {
    options.split_row_elements = 64;
  } else if (kind == "cpustream") {
    options.streaming_output_bytes = 0;  // every feature gather with non-temporal stores
  } else if (kind == "cpumiss") {
    options.candidate_sigmas = -3.0;
    options.candidate_slack = 0.0;
  } else if (kind != "cpu") {
    throw std::invalid_argument("unknown backend " + name);
  }
  return MakeCpuBackend(options);
}

// Backends are cached: the CUDA context and CPU pools are expensive to create.
Backend* CachedBackend(const std::string& name) {
  static std::vector<std::pair<std::string, std::unique_ptr<Backend>>> cache;
  for (auto& [n, b] : cache) {
    if (n == name) return b.get();
  }
  cache.emplace_back(name, MakeBackend(name));
  return cache.back().second.get();
}

// The devices' launches, cached like the backends.
StagedLaunch& CachedLaunch(const std::string& name) {
  static std::vector<std::pair<std::string, std::unique_ptr<StagedLaunch>>> cache;
  for (auto& [n, l] : cache) {
    if (n == name) return *l;
  }
  cache.emplace_back(name, std::make_unique<StagedLaunch>(name == "cuda" ? 0 : kSimDevice,
                                                          std::chrono::milliseconds(600000)));
  return *cache.back().second;
}

bool IsDevice(const std::string& name) { return name == "cuda" || name == "cudasimdevice"; }

}  // namespace

std::vector<Result> RunFused(const std::string& backend_name, const std::vector<Case>& cases) {
  BatchBuilder builder;
  for (const auto& c : cases) {
    builder.set_lower_binary(c.lower_binary);
    std::vector<int64_t> lengths;
    for (const auto& row : c.rows) lengths.push_back(static_cast<int64_t>(row.size()));
    builder.AddRequest(c.spec, c.seed, c.dtype, lengths, c.feature_row_bytes, !c.scores.empty());
  }
  const auto& rows = builder.rows();
  std::vector<uint8_t> labels(static_cast<size_t>(builder.label_bytes()) + 1);
  std::vector<uint8_t> features(static_cast<size_t>(builder.feature_bytes()) + 1);
  {
    size_t r = 0;
    for (const auto& c : cases) {
      for (size_t j = 0; j < c.rows.size(); ++j, ++r) {
        const RowDesc& d = rows[r];
        const size_t item = DTypeSize(c.dtype);
        for (size_t i = 0; i < c.rows[j].size(); ++i) {
          EncodeLabel(c.dtype, c.rows[j][i], labels.data() + d.label_offset + i * item);
          for (int64_t b = 0; b < d.feature_row_bytes; ++b) {
            features[d.feature_offset + i * d.feature_row_bytes + b] =
                FeatureByte(d.row_in_request, static_cast<int64_t>(i), b);
          }
        }
      }
    }
  }
  // Outputs start filled with a poison byte so unwritten slots are caught.
  std::vector<int64_t> out_idx(static_cast<size_t>(builder.total_slots()), -7);
  std::vector<uint8_t> out_lab(static_cast<size_t>(builder.out_label_bytes()) + 1, 0xAB);
  std::vector<uint8_t> out_feat(static_cast<size_t>(builder.out_feature_bytes()) + 1, 0xAB);
  std::vector<int32_t> num_pos(rows.size(), -7), num_neg(rows.size(), -7);
  std::vector<float> scores(static_cast<size_t>(builder.total_scores()) + 1, 0.0f);
  {
    size_t r = 0;
    for (const auto& c : cases) {
      for (size_t j = 0; j < c.rows.size(); ++j, ++r) {
        if (c.scores.empty()) continue;
        std::copy(c.scores[j].begin(), c.scores[j].end(), scores.begin() + rows[r].score_offset);
      }
    }
  }
  std::vector<int32_t> num_per_class(static_cast<size_t>(builder.total_class_outputs()) + 1, -7);

  if (!IsDevice(backend_name)) {
    Backend* backend = CachedBackend(backend_name);
    Batch batch;
    builder.FillSizes(&batch);
    batch.labels = labels.data();
    batch.features = features.data();
    batch.out_indices = out_idx.data();
    batch.out_labels = out_lab.data();
    batch.out_features = out_feat.data();
    batch.out_num_positive = num_pos.data();
    batch.out_num_negative = num_neg.data();
    batch.class_tables = builder.class_tables().data();
    batch.scores = scores.data();
    batch.out_num_per_class = num_per_class.data();
    backend->Sample(batch);
  } else {
    // A device ("cuda", "cudasimdevice"): the server's launch (kernels::StagedLaunch), one
    // request per case. Every case's features and every other case's labels are resident
    // in the device's memory (read in place by the kernels); the other labels are staged.
    const int device = backend_name == "cuda" ? 0 : kSimDevice;
    StagedLaunch& launch = CachedLaunch(backend_name);
    std::vector<void*> owned;
    auto resident = [&](const uint8_t* src, size_t bytes) {
      void* d = DeviceAlloc(device, bytes + 8);
      owned.push_back(d);
      CopyToDevice(device, d, src, bytes);
      return static_cast<const uint8_t*>(d);
    };
    std::vector<LaunchRequest> requests(cases.size());
    std::vector<std::vector<int64_t>> offsets(cases.size());
    size_t first = 0;
    for (size_t j = 0; j < cases.size(); ++j) {
      const Case& c = cases[j];
      LaunchRequest& q = requests[j];
      q.spec = c.spec;
      q.seed = c.seed;
      q.label_dtype = c.dtype;
      q.num_rows = static_cast<int64_t>(c.rows.size());
      q.feature_row_bytes = c.feature_row_bytes;
      offsets[j] = {0};
      for (const auto& row : c.rows)
        offsets[j].push_back(offsets[j].back() + static_cast<int64_t>(row.size()));
      q.row_offsets = offsets[j].data();
      if (c.rows.empty()) continue;
      const RowDesc& head = rows[first];
      if (!c.scores.empty()) q.scores = scores.data() + head.score_offset;
      q.lower_binary = c.lower_binary;
      const int64_t n = offsets[j].back();
      q.labels = labels.data() + head.label_offset;
      if (j % 2 == 1 && n > 0) {
        q.device_labels = resident(q.labels, static_cast<size_t>(n) * DTypeSize(c.dtype));
      }
      if (c.feature_row_bytes > 0) {
        q.features = features.data() + head.feature_offset;
        if (n > 0)
          q.device_features = resident(q.features, static_cast<size_t>(n * c.feature_row_bytes));
      }
      first += c.rows.size();
    }
    const std::vector<LaunchOutput>& outs = launch.Run(requests);
    size_t r = 0;
    for (size_t j = 0; j < cases.size(); ++j) {
      const LaunchOutput& o = outs[j];
      const size_t item = DTypeSize(cases[j].dtype);
      for (int64_t rr = 0; rr < o.num_rows; ++rr, ++r) {
        const RowDesc& d = rows[r];
        const int64_t k = o.k;
        if (k > 0) {  // K = 0: no slots (and the output pointers may be null)
          std::memcpy(out_idx.data() + d.out_slot, o.indices + rr * k, static_cast<size_t>(k) * 8);
          std::memcpy(out_lab.data() + d.out_label_offset, o.labels + rr * k * item,
                      static_cast<size_t>(k) * item);
        }
        if (d.feature_row_bytes > 0 && o.features != nullptr) {
          std::memcpy(out_feat.data() + d.out_feature_offset,
                      o.features + rr * k * d.feature_row_bytes,
                      static_cast<size_t>(k * d.feature_row_bytes));
        }
        num_pos[r] = o.num_positive[rr];
        num_neg[r] = o.num_negative[rr];
        if (o.num_classes > 0) {
          const BatchBuilder::RequestClasses& info = builder.requests()[j];
          std::memcpy(num_per_class.data() + info.out_class_offset + rr * o.num_classes,
                      o.num_per_class + rr * o.num_classes,
                      sizeof(int32_t) * static_cast<size_t>(o.num_classes));
        }
      }
    }
    for (void* p : owned) DeviceFree(p);
  }

  std::vector<Result> results;
  size_t r = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const BatchBuilder::RequestClasses& info = builder.requests()[ci];
    Result res;
    const size_t item = DTypeSize(c.dtype);
    for (size_t j = 0; j < c.rows.size(); ++j, ++r) {
      const RowDesc& d = rows[r];
      const int64_t k = d.num_samples;
      res.indices.emplace_back(out_idx.begin() + d.out_slot, out_idx.begin() + d.out_slot + k);
      std::vector<int64_t> lab;
      for (int64_t s = 0; s < k; ++s) {
        lab.push_back(DecodeLabel(c.dtype, out_lab.data() + d.out_label_offset + s * item));
      }
      res.labels.push_back(std::move(lab));
      res.features.emplace_back(out_feat.begin() + d.out_feature_offset,
                                out_feat.begin() + d.out_feature_offset + k * d.feature_row_bytes);
      res.num_positive.push_back(num_pos[r]);
      res.num_negative.push_back(num_neg[r]);
      if (info.num_classes > 0) {
        std::vector<int32_t> m(static_cast<size_t>(info.num_classes));
        if (info.lowered && !IsDevice(backend_name)) {
          // A host backend sampled the binary rows; the counts are the caller's to map.
          BatchBuilder::LoweredCounts(info, num_pos[r], num_neg[r], m.data());
        } else {
          const int64_t at = info.out_class_offset + static_cast<int64_t>(j) * info.num_classes;
          std::copy(num_per_class.begin() + at, num_per_class.begin() + at + info.num_classes,
                    m.begin());
        }
        res.num_per_class.push_back(std::move(m));
      }
    }
    results.push_back(std::move(res));
  }
  return results;
}

Result RunOne(const std::string& backend, const Case& c) { return RunFused(backend, {c})[0]; }

LaunchStats LastStats(const std::string& backend) {
  LaunchStats stats;
  Backend& b = IsDevice(backend) ? CachedLaunch(backend).backend() : *CachedBackend(backend);
  if (!b.last_launch_stats(&stats)) {
    throw std::invalid_argument(backend + " keeps no launch stats");
  }
  return stats;
}

// A reference row's K slots from its selected (v, i) pairs: sorted by (v, i), padded as
// section 1 says. `stored` reads a label as the case's dtype stores it.
template <class Stored>
void AppendReferenceRow(const Case& c, uint32_t row, int64_t k, const std::vector<int64_t>& labels,
                        const Stored& stored, std::vector<std::pair<uint32_t, int64_t>>* chosen,
                        Result* res) {
  std::sort(chosen->begin(), chosen->end());
  std::vector<int64_t> idx(static_cast<size_t>(k), -1), lab(static_cast<size_t>(k));
  std::vector<uint8_t> feat(static_cast<size_t>(k * c.feature_row_bytes), 0);
  const int64_t pad = (c.dtype == DType::kUInt8 || c.dtype == DType::kBool) ? 0 : -1;
  for (int64_t s = 0; s < k; ++s) {
    if (s < static_cast<int64_t>(chosen->size())) {
      const int64_t i = (*chosen)[s].second;
      idx[s] = i;
      lab[s] = stored(labels[i]);
      for (int64_t b = 0; b < c.feature_row_bytes; ++b) {
        feat[s * c.feature_row_bytes + b] = FeatureByte(row, i, b);
      }
    } else {
      lab[s] = pad;
    }
  }
  res->indices.push_back(std::move(idx));
  res->labels.push_back(std::move(lab));
  res->features.push_back(std::move(feat));
}

Result Reference(const Case& c) {
  Result res;
  const int64_t k = c.spec.num_samples;
  const int64_t target =
      static_cast<int64_t>(std::floor(static_cast<double>(k) * c.spec.positive_fraction));
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const auto& labels = c.rows[r];
    // Labels as the dtype stores them (BOOL / UINT8 wrap like the encoder).
    auto stored = [&](int64_t v) {
      uint8_t buf[8];
      EncodeLabel(c.dtype, v, buf);
      return DecodeLabel(c.dtype, buf);
    };
    std::vector<std::pair<uint32_t, int64_t>> pos, neg;
    const uint32_t row = static_cast<uint32_t>(r);
    for (int64_t i = 0; i < static_cast<int64_t>(labels.size()); ++i) {
      const int64_t x = stored(labels[i]);
      const uint32_t u = ElementKey(c.seed, row, kSelectionStream, static_cast<uint64_t>(i));
      if (x == c.spec.positive_label) pos.emplace_back(u, i);
      if (x == c.spec.negative_label) neg.emplace_back(u, i);
    }
    const int64_t p = static_cast<int64_t>(pos.size()), q = static_cast<int64_t>(neg.size());
    int64_t m_pos = std::min(p, target), m_neg = 0;
    if (c.spec.fill == FillPolicy::kBoth) {
      m_neg = std::min(q, k - m_pos);
      m_pos = std::min(p, k - m_neg);
    } else if (c.spec.fill == FillPolicy::kNegativesOnly) {
      m_neg = std::min(q, k - m_pos);
    } else {
      m_neg = std::min(q, k - target);
    }
    std::sort(pos.begin(), pos.end());
    std::sort(neg.begin(), neg.end());
    std::vector<std::pair<uint32_t, int64_t>> chosen;
    for (int64_t j = 0; j < m_pos; ++j) {
      const int64_t i = pos[j].second;
      chosen.emplace_back(ElementKey(c.seed, row, kOrderStream, static_cast<uint64_t>(i)), i);
    }
    for (int64_t j = 0; j < m_neg; ++j) {
      const int64_t i = neg[j].second;
      chosen.emplace_back(ElementKey(c.seed, row, kOrderStream, static_cast<uint64_t>(i)), i);
    }
    AppendReferenceRow(c, row, k, labels, stored, &chosen, &res);
    res.num_positive.push_back(static_cast<int32_t>(m_pos));
    res.num_negative.push_back(static_cast<int32_t>(m_neg));
  }
  return res;
}

Result ReferenceClasses(const Case& c) {
  Result res;
  const auto& classes = c.spec.classes;
  const int64_t num_classes = static_cast<int64_t>(classes.size());
  const int64_t k = c.spec.num_samples;
  // Targets (step 1): counts, fractions in IEEE double, then the rest.
  std::vector<int64_t> target(static_cast<size_t>(num_classes), 0);
  int64_t others = 0;
  for (int64_t j = 0; j < num_classes; ++j) {
    const ClassSpec& cs = classes[j];
    if (cs.share == Share::kCount) target[j] = cs.count;
    if (cs.share == Share::kFraction) {
      target[j] = static_cast<int64_t>(std::floor(static_cast<double>(k) * cs.fraction));
    }
    if (cs.share != Share::kRest) others += target[j];
  }
  for (int64_t j = 0; j < num_classes; ++j) {
    if (classes[j].share == Share::kRest) target[j] = k - others;
  }
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const auto& labels = c.rows[r];
    const uint32_t row = static_cast<uint32_t>(r);
    auto stored = [&](int64_t v) {
      uint8_t buf[8];
      EncodeLabel(c.dtype, v, buf);
      return DecodeLabel(c.dtype, buf);
    };
    struct Member {
      int64_t i;
      uint32_t u;
      float score;
    };
    std::vector<std::vector<Member>> members(static_cast<size_t>(num_classes));
    for (int64_t i = 0; i < static_cast<int64_t>(labels.size()); ++i) {
      const int64_t x = stored(labels[i]);
      const float score = c.scores.empty() ? std::nanf("") : c.scores[r][i];
      for (int64_t j = 0; j < num_classes; ++j) {
        bool in = false;
        for (const LabelRange& range : classes[j].labels)
          in = in || (range.lo <= x && x <= range.hi);
        if (!in) continue;
        const Selection sel = classes[j].selection;
        if (sel == Selection::kWeighted && !(score > 0.0f)) break;
        if ((sel == Selection::kHardest || sel == Selection::kMixed) && std::isnan(score)) break;
        members[j].push_back(
            {i, ElementKey(c.seed, row, kSelectionStream, static_cast<uint64_t>(i)), score});
        break;
      }
    }
    // Quotas (steps 2 and 3).
    std::vector<int64_t> m(static_cast<size_t>(num_classes));
    int64_t left = k;
    for (int64_t j = 0; j < num_classes; ++j) {
      m[j] = std::min<int64_t>(static_cast<int64_t>(members[j].size()), target[j]);
      left -= m[j];
    }
    for (int32_t j : c.spec.fill_order) {
      const int64_t e = std::min<int64_t>(static_cast<int64_t>(members[j].size()) - m[j], left);
      m[j] += e;
      left -= e;
    }
    auto by_u = [](const Member& a, const Member& b) {
      return a.u < b.u || (a.u == b.u && a.i < b.i);
    };
    // Largest score first as IEEE values (-0.0 == +0.0), ties by (u, i).
    auto by_score = [&](const Member& a, const Member& b) {
      if (a.score != b.score) return a.score > b.score;
      return by_u(a, b);
    };
    std::vector<std::pair<uint32_t, int64_t>> chosen;
    for (int64_t j = 0; j < num_classes; ++j) {
      std::vector<Member> ms = members[j];
      const Selection sel = classes[j].selection;
      int64_t hard = 0;
      if (sel == Selection::kHardest) hard = m[j];
      if (sel == Selection::kMixed) {
        hard =
            static_cast<int64_t>(std::floor(static_cast<double>(m[j]) * classes[j].hard_fraction));
      }
      if (sel == Selection::kWeighted) {
        auto key = [&](const Member& a) {
          const uint32_t u2 = ElementKey(c.seed, row, kWeightStream, static_cast<uint64_t>(a.i));
          return WeightedKeyBits(WeightedE(a.u, u2), a.score);
        };
        std::sort(ms.begin(), ms.end(), [&](const Member& a, const Member& b) {
          const uint64_t ka = key(a), kb = key(b);
          return ka < kb || (ka == kb && a.i < b.i);
        });
      } else {
        std::sort(ms.begin(), ms.end(), by_score);
        std::sort(ms.begin() + hard, ms.end(), by_u);
        if (sel == Selection::kUniform) std::sort(ms.begin(), ms.end(), by_u);
      }
      for (int64_t t = 0; t < m[j]; ++t) {
        const int64_t i = ms[t].i;
        chosen.emplace_back(ElementKey(c.seed, row, kOrderStream, static_cast<uint64_t>(i)), i);
      }
    }
    AppendReferenceRow(c, row, k, labels, stored, &chosen, &res);
    res.num_positive.push_back(num_classes <= 2 ? static_cast<int32_t>(m[0]) : 0);
    res.num_negative.push_back(num_classes == 2 ? static_cast<int32_t>(m[1]) : 0);
    std::vector<int32_t> per_class;
    for (int64_t j = 0; j < num_classes; ++j) per_class.push_back(static_cast<int32_t>(m[j]));
    res.num_per_class.push_back(std::move(per_class));
  }
  return res;
}

std::vector<int64_t> RandomLabels(int64_t n, double p_pos, double p_neg, uint64_t seed,
                                  int64_t pos_label, int64_t neg_label) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& x : out) {
    const double z = uni(gen);
    x = z < p_pos ? pos_label : (z < p_pos + p_neg ? neg_label : -1);
  }
  return out;
}

Case BalancedCase(int64_t rows, int64_t n, int64_t k, int64_t feature_bytes, uint64_t seed) {
  Case c;
  c.spec.num_samples = k;
  c.spec.positive_fraction = 0.5;
  c.seed = seed;
  c.feature_row_bytes = feature_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    c.rows.push_back(RandomLabels(n, 0.5, 0.5, seed * 131 + static_cast<uint64_t>(r)));
  }
  return c;
}

void PrintStats(const std::string& name, const LaunchStats& s) {
  std::cout << name << ": launches " << s.launches << ", bytes_per_element "
            << s.bytes_per_element() << ", smem_bytes_per_element " << s.smem_bytes_per_element()
            << ", philox_calls " << s.philox_calls << ", feature_bytes " << s.feature_bytes
            << ", label_elements " << s.label_elements << "\n";
}

}  // namespace gpusampler::kernels::testing
