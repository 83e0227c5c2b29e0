#include "bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <iomanip>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

v1::SampleRequest MakeRequest(const BenchOptions& o) {
  std::mt19937_64 rng(12345);
  std::bernoulli_distribution positive(o.positive_rate);
  std::vector<int64_t> labels(static_cast<size_t>(o.rows * o.n));
  for (int64_t& l : labels) l = positive(rng) ? 1 : 0;
  v1::SampleRequest request;
  request.mutable_spec()->set_num_samples(o.k);
  *request.mutable_labels() = MakeTensor(labels, {o.rows, o.n});
  if (!o.labels_only) {
    std::normal_distribution<float> normal;
    std::vector<float> features(static_cast<size_t>(o.rows * o.n * o.dim));
    for (float& f : features) f = normal(rng);
    *request.mutable_features() = MakeTensor(features, {o.rows, o.n, o.dim});
  }
  return request;
}

// Hands out request tickets and their scheduled start times.
class Schedule {
 public:
  Schedule(const BenchOptions& o, SteadyClock::time_point start) : o_(o), start_(start) {
    if (o.duration_s > 0) {
      end_ = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(o.duration_s));
    }
  }
  // False when the budget is spent. Sleeps until the ticket's time under a rate limit.
  bool Next(SteadyClock::time_point* scheduled) {
    const int64_t i = next_.fetch_add(1);
    if (o_.requests > 0 && i >= o_.requests) return false;
    *scheduled = SteadyClock::now();
    if (o_.rate > 0) {
      *scheduled = start_ + std::chrono::duration_cast<SteadyClock::duration>(
                                std::chrono::duration<double>(i / o_.rate));
      if (o_.duration_s > 0 && *scheduled >= end_) return false;
      std::this_thread::sleep_until(*scheduled);
    }
    return !(o_.duration_s > 0 && SteadyClock::now() >= end_);
  }

 private:
  const BenchOptions& o_;
  SteadyClock::time_point start_, end_;
  std::atomic<int64_t> next_{0};
};

struct Tally {
  std::mutex mu;
  std::vector<double> latencies_ms;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;
  void Record(const grpc::Status& status, double ms) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) {
      ++ok;
      latencies_ms.push_back(ms);
    } else {
      ++errors[StatusCodeName(status.error_code())];
    }
  }
};

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void UnaryWorker(Client& client, const v1::SampleRequest& request, Schedule& schedule,
                 bool use_schedule_time, Tally& tally) {
  v1::SampleResponse response;
  SteadyClock::time_point scheduled;
  while (schedule.Next(&scheduled)) {
    const auto sent = use_schedule_time ? scheduled : SteadyClock::now();
    grpc::Status status = client.Sample(request, &response);
    tally.Record(status, Ms(SteadyClock::now() - sent));
  }
}

void StreamWorker(Client& client, const v1::SampleRequest& request, const BenchOptions& o,
                  Schedule& schedule, Tally& tally) {
  bool more = true;
  while (more) {
    auto session = client.OpenSession(o.window);
    std::mutex mu;
    std::deque<SteadyClock::time_point> sent;  // FIFO: responses come in request order
    grpc::Status status = session->Run(
        [&](v1::SampleRequest* next) {
          SteadyClock::time_point scheduled;
          if (!schedule.Next(&scheduled)) {
            more = false;
            return false;
          }
          *next = request;
          std::lock_guard<std::mutex> lock(mu);
          sent.push_back(o.rate > 0 ? scheduled : SteadyClock::now());
          return true;
        },
        [&](v1::SampleResponse&&) {
          SteadyClock::time_point t;
          {
            std::lock_guard<std::mutex> lock(mu);
            t = sent.front();
            sent.pop_front();
          }
          tally.Record(grpc::Status::OK, Ms(SteadyClock::now() - t));
        });
    // A failed stream ends with the status of its first failing request; the requests
    // behind it were never answered and are not counted.
    if (!status.ok()) tally.Record(status, 0);
  }
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "CODE_" + std::to_string(i);
}

BenchResult RunBench(Client& client, const BenchOptions& options) {
  BenchOptions o = options;
  if (o.requests <= 0 && o.duration_s <= 0) o.requests = 1000;
  const v1::SampleRequest request = MakeRequest(o);
  Tally tally;
  const auto start = SteadyClock::now();
  Schedule schedule(o, start);
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, o.concurrency); ++w) {
    workers.emplace_back([&] {
      if (o.stream) {
        StreamWorker(client, request, o, schedule, tally);
      } else {
        UnaryWorker(client, request, schedule, o.rate > 0, tally);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();

  BenchResult r;
  r.ok = tally.ok;
  r.errors = tally.errors;
  r.requests = tally.ok;
  for (const auto& [code, count] : r.errors) r.requests += count;
  r.duration_s = elapsed;
  std::vector<double>& lat = tally.latencies_ms;
  std::sort(lat.begin(), lat.end());
  r.p50_ms = Percentile(lat, 0.50);
  r.p90_ms = Percentile(lat, 0.90);
  r.p99_ms = Percentile(lat, 0.99);
  r.max_ms = lat.empty() ? 0 : lat.back();
  double sum = 0;
  for (double v : lat) sum += v;
  r.mean_ms = lat.empty() ? 0 : sum / lat.size();
  r.throughput_rps = elapsed > 0 ? r.ok / elapsed : 0;
  r.rows_per_s = static_cast<int64_t>(r.throughput_rps * o.rows);
  return r;
}

void PrintBenchText(const BenchOptions& o, const BenchResult& r, std::ostream& out) {
  out << std::fixed << std::setprecision(3);
  out << "requests     " << r.requests << " (" << r.ok << " ok) in " << r.duration_s << " s, "
      << (o.stream ? "stream window " + std::to_string(o.window) : std::string("unary"))
      << ", concurrency " << o.concurrency << "\n";
  out << "shape        rows " << o.rows << " x n " << o.n << ", k " << o.k
      << (o.labels_only ? ", labels only" : ", dim " + std::to_string(o.dim)) << "\n";
  out << "throughput   " << r.throughput_rps << " req/s, " << r.rows_per_s << " rows/s\n";
  out << "latency ms   p50 " << r.p50_ms << "  p90 " << r.p90_ms << "  p99 " << r.p99_ms << "  max "
      << r.max_ms << "  mean " << r.mean_ms << "\n";
  out << "errors       ";
  if (r.errors.empty()) out << "none";
  for (const auto& [code, count] : r.errors) out << code << "=" << count << " ";
  out << "\n";
}

void PrintBenchJson(const BenchOptions& o, const BenchResult& r, std::ostream& out) {
  out << std::setprecision(6) << std::fixed;
  out << "{\"requests\": " << r.requests << ", \"ok\": " << r.ok << ", \"errors\": {";
  bool first = true;
  for (const auto& [code, count] : r.errors) {
    out << (first ? "" : ", ") << "\"" << code << "\": " << count;
    first = false;
  }
  out << "}, \"duration_s\": " << r.duration_s << ", \"throughput_rps\": " << r.throughput_rps
      << ", \"rows_per_s\": " << r.rows_per_s << ", \"p50_ms\": " << r.p50_ms
      << ", \"p90_ms\": " << r.p90_ms << ", \"p99_ms\": " << r.p99_ms
      << ", \"max_ms\": " << r.max_ms << ", \"mean_ms\": " << r.mean_ms
      << ", \"concurrency\": " << o.concurrency << ", \"stream\": " << (o.stream ? "true" : "false")
      << ", \"window\": " << o.window << ", \"rate\": " << o.rate << ", \"rows\": " << o.rows
      << ", \"n\": " << o.n << ", \"k\": " << o.k << ", \"dim\": " << o.dim
      << ", \"labels_only\": " << (o.labels_only ? "true" : "false") << "}\n";
}

}  // namespace gpusampler::client
