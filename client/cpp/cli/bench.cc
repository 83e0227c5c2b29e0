#include "bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

v1::SampleRequest MakeRequest(const BenchOptions& o) {
  std::mt19937_64 rng(12345);
  if (!o.dataset.empty()) {
    v1::SampleRequest request;
    request.mutable_spec()->set_num_samples(o.k);
    request.set_dataset(o.dataset);
    request.set_return_features(o.return_features);
    if (o.dataset_rows > 0) {
      std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(0, o.dataset_num_rows - 1));
      std::vector<int64_t> ids(static_cast<size_t>(o.dataset_rows));
      for (int64_t& id : ids) id = row(rng);
      *request.mutable_rows() = MakeTensor(ids, {o.dataset_rows});
    }
    return request;
  }
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
  // False when the budget is spent or Stop() was called. Sleeps until the ticket's time
  // under a rate limit.
  bool Next(SteadyClock::time_point* scheduled) {
    if (stopped_.load()) return false;
    const int64_t i = next_.fetch_add(1);
    if (o_.requests > 0 && i >= o_.requests) return false;
    *scheduled = SteadyClock::now();
    if (o_.rate > 0) {
      *scheduled = start_ + std::chrono::duration_cast<SteadyClock::duration>(
                                std::chrono::duration<double>(i / o_.rate));
      if (o_.duration_s > 0 && *scheduled >= end_) return false;
      std::this_thread::sleep_until(*scheduled);
    }
    return !stopped_.load() && !(o_.duration_s > 0 && SteadyClock::now() >= end_);
  }
  void Stop() { stopped_.store(true); }

 private:
  const BenchOptions& o_;
  SteadyClock::time_point start_, end_;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stopped_{false};
};

struct Tally {
  std::mutex mu;
  std::vector<double> latencies_ms;
  std::vector<double> queue_ms, compute_ms, total_ms;  // ServerTiming of the successes
  int64_t ok = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors;
  std::map<std::string, std::string> first_message;
  SteadyClock::time_point last_ok = SteadyClock::now();  // or the start
  int64_t failed_since_ok = 0;
  void Record(const grpc::Status& status, double ms, const v1::ServerTiming* timing = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) {
      ++ok;
      latencies_ms.push_back(ms);
      if (timing != nullptr) {
        queue_ms.push_back(timing->queue_us() / 1000.0);
        compute_ms.push_back(timing->compute_us() / 1000.0);
        total_ms.push_back(timing->total_us() / 1000.0);
      }
      last_ok = SteadyClock::now();
      failed_since_ok = 0;
    } else {
      ++failed;
      ++failed_since_ok;
      const std::string code = StatusCodeName(status.error_code());
      if (++errors[code] == 1) first_message[code] = status.error_message();
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
    tally.Record(status, Ms(SteadyClock::now() - sent), status.ok() ? &response.timing() : nullptr);
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
        [&](v1::SampleResponse&& response) {
          SteadyClock::time_point t;
          {
            std::lock_guard<std::mutex> lock(mu);
            t = sent.front();
            sent.pop_front();
          }
          tally.Record(grpc::Status::OK, Ms(SteadyClock::now() - t), &response.timing());
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

// "3", "0.5": a setting as the user wrote it, whatever the stream's format flags.
std::string Seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

std::string FormatMs(double ms, bool have) {
  if (!have) return "n/a";
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << ms;
  return out.str();
}

// Once a second: a progress line, and the early stop when everything has been failing.
void Monitor(const BenchOptions& o, Tally& tally, Schedule& schedule, SteadyClock::time_point start,
             std::mutex& mu, std::condition_variable& cv, const bool& done, bool* aborted) {
  size_t seen = 0;
  int64_t ok_before = 0;
  auto last = start;
  std::unique_lock<std::mutex> lock(mu);
  while (!cv.wait_until(lock, last + std::chrono::seconds(1), [&] { return done; })) {
    const auto now = SteadyClock::now();
    int64_t ok, failed, failed_since_ok;
    SteadyClock::time_point last_ok;
    std::vector<double> window;
    std::string first_error;
    {
      std::lock_guard<std::mutex> t(tally.mu);
      ok = tally.ok;
      failed = tally.failed;
      failed_since_ok = tally.failed_since_ok;
      last_ok = tally.last_ok;
      window.assign(tally.latencies_ms.begin() + static_cast<std::ptrdiff_t>(seen),
                    tally.latencies_ms.end());
      seen = tally.latencies_ms.size();
      if (!tally.first_message.empty()) {
        first_error = tally.errors.begin()->first + ": " + tally.first_message.begin()->second;
      }
    }
    const double dt = std::chrono::duration<double>(now - last).count();
    if (o.progress != nullptr) {
      std::sort(window.begin(), window.end());
      *o.progress << std::fixed << std::setprecision(1) << "[" << std::setw(5)
                  << std::chrono::duration<double>(now - start).count() << " s] "
                  << (dt > 0 ? (ok - ok_before) / dt : 0.0) << " req/s, p50 "
                  << FormatMs(Percentile(window, 0.5), !window.empty()) << " ms, ok " << ok
                  << ", errors " << failed << std::endl;
    }
    ok_before = ok;
    last = now;
    if (o.abort_after_s > 0 && failed_since_ok > 0 &&
        std::chrono::duration<double>(now - last_ok).count() >= o.abort_after_s) {
      *aborted = true;
      schedule.Stop();
      if (o.progress != nullptr) {
        *o.progress << "aborting: every request has failed for " << Seconds(o.abort_after_s)
                    << " s (first error " << first_error << ")" << std::endl;
      }
      return;
    }
  }
}

double Median(std::vector<double>* v) {
  std::sort(v->begin(), v->end());
  return Percentile(*v, 0.5);
}

}  // namespace

int DefaultConcurrency() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 4);
}

std::string ParseRange(const std::string& text, Range* out) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, ':')) parts.push_back(part);
  if (parts.size() != 2 && parts.size() != 3) return "'" + text + "' is not a:b or a:b:step";
  double v[3] = {0, 0, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    size_t used = 0;
    try {
      v[i] = std::stod(parts[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != parts[i].size() || !std::isfinite(v[i])) {
      return "'" + parts[i] + "' in '" + text + "' is not a number";
    }
  }
  if (v[0] < 0 || v[1] < v[0]) return "'" + text + "': need 0 <= a <= b";
  if (v[2] <= 0) return "'" + text + "': the step must be > 0";
  *out = Range{v[0], v[1], v[2]};
  return "";
}

std::vector<double> RangePoints(const Range& r) {
  std::vector<double> points;
  // An integer count of steps, so that 0.1 steps do not drift past the end.
  const auto steps = static_cast<int64_t>(std::floor((r.end - r.begin) / r.step + 1e-9));
  for (int64_t i = 0; i <= steps; ++i) points.push_back(r.begin + static_cast<double>(i) * r.step);
  return points;
}

BenchResult RunStable(Client& client, const BenchOptions& options, double percent,
                      int max_windows) {
  std::vector<BenchResult> windows;
  auto within = [&](auto value) {
    double mean = 0;
    for (size_t i = windows.size() - 3; i < windows.size(); ++i) mean += value(windows[i]);
    mean /= 3;
    for (size_t i = windows.size() - 3; i < windows.size(); ++i) {
      if (std::abs(value(windows[i]) - mean) > mean * percent / 100.0) return false;
    }
    return true;
  };
  bool stable = false;
  while (static_cast<int>(windows.size()) < std::max(3, max_windows)) {
    windows.push_back(RunBench(client, options));
    if (windows.back().ok == 0 || windows.back().aborted) break;  // nothing to compare
    if (windows.size() >= 3 && within([](const BenchResult& r) { return r.throughput_rps; }) &&
        within([](const BenchResult& r) { return r.p50_ms; })) {
      stable = true;
      break;
    }
  }
  BenchResult last = windows.back();
  last.windows = static_cast<int>(windows.size());
  last.stable = stable;
  return last;
}

void PrintBenchCsvHeader(std::ostream& out) {
  out << "concurrency,rate,stream,requests,ok,errors,duration_s,throughput_rps,rows_per_s,"
         "p50_ms,p90_ms,p99_ms,max_ms,mean_ms,server_queue_p50_ms,server_compute_p50_ms,"
         "server_total_p50_ms,windows,stable\n";
}

void PrintBenchCsvRow(const BenchOptions& o, const BenchResult& r, std::ostream& out) {
  int64_t errors = 0;
  for (const auto& [code, count] : r.errors) errors += count;
  std::ostringstream line;
  line << std::fixed << std::setprecision(3);
  const bool have = r.ok > 0;
  auto ms = [&](double v) { return have ? FormatMs(v, true) : std::string(); };
  line << o.concurrency << "," << o.rate << "," << (o.stream ? 1 : 0) << "," << r.requests << ","
       << r.ok << "," << errors << "," << r.duration_s << "," << r.throughput_rps << ","
       << r.rows_per_s << "," << ms(r.p50_ms) << "," << ms(r.p90_ms) << "," << ms(r.p99_ms) << ","
       << ms(r.max_ms) << "," << ms(r.mean_ms) << "," << ms(r.server_queue_p50_ms) << ","
       << ms(r.server_compute_p50_ms) << "," << ms(r.server_total_p50_ms) << "," << r.windows << ","
       << (r.stable ? 1 : 0) << "\n";
  out << line.str();
}

int64_t RowsPerRequest(const BenchOptions& o) {
  if (o.dataset.empty()) return o.rows;
  return o.dataset_rows > 0 ? o.dataset_rows : o.dataset_num_rows;
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

BenchResult RunBench(Client& client, const BenchOptions& options) {
  BenchOptions o = options;
  if (o.requests <= 0 && o.duration_s <= 0) o.requests = 1000;
  const v1::SampleRequest request = MakeRequest(o);
  Tally tally;
  const auto start = SteadyClock::now();
  Schedule schedule(o, start);
  std::mutex monitor_mu;
  std::condition_variable monitor_cv;
  bool done = false, aborted = false;
  std::thread monitor(
      [&] { Monitor(o, tally, schedule, start, monitor_mu, monitor_cv, done, &aborted); });
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
  {
    std::lock_guard<std::mutex> lock(monitor_mu);
    done = true;
  }
  monitor_cv.notify_all();
  monitor.join();
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();

  BenchResult r;
  r.ok = tally.ok;
  r.errors = tally.errors;
  r.error_messages = tally.first_message;
  r.aborted = aborted;
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
  r.rows_per_s = static_cast<int64_t>(r.throughput_rps * RowsPerRequest(o));
  r.server_queue_p50_ms = Median(&tally.queue_ms);
  r.server_compute_p50_ms = Median(&tally.compute_ms);
  r.server_total_p50_ms = Median(&tally.total_ms);
  return r;
}

void PrintBenchText(const BenchOptions& o, const BenchResult& r, std::ostream& out) {
  out << std::fixed << std::setprecision(3);
  out << "requests     " << r.requests << " (" << r.ok << " ok) in " << r.duration_s << " s, "
      << (o.stream ? "stream window " + std::to_string(o.window) : std::string("unary"))
      << ", concurrency " << o.concurrency << "\n";
  if (o.dataset.empty()) {
    out << "shape        rows " << o.rows << " x n " << o.n << ", k " << o.k
        << (o.labels_only ? ", labels only" : ", dim " + std::to_string(o.dim)) << "\n";
  } else {
    out << "dataset      " << o.dataset << ", rows " << RowsPerRequest(o) << " per request"
        << (o.dataset_rows > 0 ? " (drawn)" : " (all)") << ", k " << o.k
        << (o.return_features ? ", with features" : ", labels only") << "\n";
  }
  out << "throughput   " << r.throughput_rps << " req/s, " << r.rows_per_s << " rows/s\n";
  const bool have = r.ok > 0;
  out << "latency ms   p50 " << FormatMs(r.p50_ms, have) << "  p90 " << FormatMs(r.p90_ms, have)
      << "  p99 " << FormatMs(r.p99_ms, have) << "  max " << FormatMs(r.max_ms, have) << "  mean "
      << FormatMs(r.mean_ms, have) << "\n";
  out << "server ms    p50 queue " << FormatMs(r.server_queue_p50_ms, have) << "  compute "
      << FormatMs(r.server_compute_p50_ms, have) << "  total "
      << FormatMs(r.server_total_p50_ms, have) << " (ServerTiming)\n";
  if (r.windows > 1) {
    out << "windows      " << r.windows << (r.stable ? ", the last three agree" : ", not stable")
        << "\n";
  }
  out << "errors       ";
  if (r.errors.empty()) out << "none";
  for (const auto& [code, count] : r.errors) out << code << "=" << count << " ";
  out << "\n";
  for (const auto& [code, message] : r.error_messages) {
    out << "  first " << code << ": " << message << "\n";
  }
  if (r.aborted) {
    out << "aborted      every request failed for " << Seconds(o.abort_after_s) << " s\n";
  }
}

void PrintBenchJson(const BenchOptions& o, const BenchResult& r, std::ostream& out) {
  out << std::setprecision(6) << std::fixed;
  out << "{\"requests\": " << r.requests << ", \"ok\": " << r.ok << ", \"errors\": {";
  bool first = true;
  for (const auto& [code, count] : r.errors) {
    out << (first ? "" : ", ") << "\"" << code << "\": " << count;
    first = false;
  }
  out << "}, \"error_messages\": {";
  first = true;
  for (const auto& [code, message] : r.error_messages) {
    out << (first ? "" : ", ") << "\"" << code << "\": " << JsonQuote(message);
    first = false;
  }
  // Latencies of successful requests only: null when there were none.
  const bool have = r.ok > 0;
  auto ms = [&](double v) {
    if (!have) return std::string("null");
    std::ostringstream text;
    text << std::fixed << std::setprecision(6) << v;
    return text.str();
  };
  out << "}, \"aborted\": " << (r.aborted ? "true" : "false")
      << ", \"duration_s\": " << r.duration_s << ", \"throughput_rps\": " << r.throughput_rps
      << ", \"rows_per_s\": " << r.rows_per_s << ", \"p50_ms\": " << ms(r.p50_ms)
      << ", \"p90_ms\": " << ms(r.p90_ms) << ", \"p99_ms\": " << ms(r.p99_ms)
      << ", \"max_ms\": " << ms(r.max_ms) << ", \"mean_ms\": " << ms(r.mean_ms)
      << ", \"server_queue_p50_ms\": " << ms(r.server_queue_p50_ms)
      << ", \"server_compute_p50_ms\": " << ms(r.server_compute_p50_ms)
      << ", \"server_total_p50_ms\": " << ms(r.server_total_p50_ms)
      << ", \"windows\": " << r.windows << ", \"stable\": " << (r.stable ? "true" : "false")
      << ", \"concurrency\": " << o.concurrency << ", \"stream\": " << (o.stream ? "true" : "false")
      << ", \"window\": " << o.window << ", \"rate\": " << o.rate;
  if (o.dataset.empty()) {
    out << ", \"rows\": " << o.rows << ", \"n\": " << o.n << ", \"k\": " << o.k
        << ", \"dim\": " << o.dim << ", \"labels_only\": " << (o.labels_only ? "true" : "false")
        << ", \"dataset\": null}\n";
  } else {
    out << ", \"rows\": " << RowsPerRequest(o) << ", \"k\": " << o.k
        << ", \"dataset\": " << JsonQuote(o.dataset)
        << ", \"dataset_rows_drawn\": " << (o.dataset_rows > 0 ? "true" : "false")
        << ", \"return_features\": " << (o.return_features ? "true" : "false") << "}\n";
  }
}

}  // namespace gpusampler::client
