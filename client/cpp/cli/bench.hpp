// Load generator behind `gpusampler-cli bench`.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "gpusampler/client/client.hpp"

namespace gpusampler::client {

// The default --concurrency: half the host's cores, 1 to 4. On a small host the client's
// workers compete with the server for the same cores, and more of them than that measured
// slower than one (bench/results/cli-bench.md).
int DefaultConcurrency();

struct BenchOptions {
  int concurrency = 4;          // workers; each has one call (or one stream) open at a time
  int64_t requests = 0;         // total requests; 0 = bounded by duration_s only
  double duration_s = 0;        // wall-clock bound; 0 = bounded by requests only
  double rate = 0;              // total requests per second across workers; 0 = closed loop
  bool stream = false;          // SampleStream sessions instead of unary calls
  int window = 4;               // requests in flight per stream
  bool labels_only = false;     // send no features
  int64_t rows = 8;             // B
  int64_t n = 4096;             // elements per row
  int64_t k = 256;              // num_samples
  int64_t dim = 16;             // float32 features per element
  double positive_rate = 0.05;  // share of positives in the synthetic labels
  // Dataset mode: sample this resident dataset instead of sending synthetic labels.
  // dataset_rows > 0 samples that many dataset rows per request (ids drawn uniformly from
  // [0, dataset_num_rows), fixed for the run); 0 samples the whole dataset each request.
  std::string dataset;
  bool return_features = false;
  int64_t dataset_rows = 0;
  int64_t dataset_num_rows = 0;  // the dataset's rows (RunBench's caller looks it up)
  // One progress line per second (rate and p50 of that second, errors so far); null: none.
  std::ostream* progress = nullptr;
  // Stop early once every request has failed for this many seconds (no success in that
  // time, at least one failure); 0 never stops early.
  double abort_after_s = 3;
};

struct BenchResult {
  int64_t requests = 0;  // answered, successfully or not
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;              // status code name -> count
  std::map<std::string, std::string> error_messages;  // status code name -> first message
  bool aborted = false;  // stopped early: every request failed for abort_after_s
  double duration_s = 0;
  // Latencies of the successful requests; meaningless (printed n/a / null) when ok == 0.
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
  double throughput_rps = 0;  // successful requests per second
  int64_t rows_per_s = 0;
  // The server's own split of the successful requests (ServerTiming): medians of the time
  // queued (acceptance to launch) and of the launch; the rest of p50 is the network, gRPC
  // and the client.
  double server_queue_p50_ms = 0, server_compute_p50_ms = 0, server_total_p50_ms = 0;
  // Stability (RunStable): the windows measured and whether the last three agreed.
  int windows = 1;
  bool stable = false;
};

// A sweep of `--concurrency-range a:b:step` or `--rate-range a:b:step`: "a:b" means step 1.
struct Range {
  double begin = 0, end = 0, step = 1;
};
// Parses "a:b[:step]" (a <= b, step > 0); "" on success, else what is wrong.
std::string ParseRange(const std::string& text, Range* out);
// The points of a range, begin to end inclusive (end included when a step lands on it).
std::vector<double> RangePoints(const Range& range);

// Stability: repeat the measurement window (options' requests or duration) until the last
// three windows' throughput and p50 are each within `percent` of their mean, at most
// `max_windows` windows. Returns the last window's result with `windows` and `stable` set.
BenchResult RunStable(Client& client, const BenchOptions& options, double percent, int max_windows);

void PrintBenchCsvHeader(std::ostream& out);
void PrintBenchCsvRow(const BenchOptions& options, const BenchResult& result, std::ostream& out);

// Runs the load. Latency is measured from each request's scheduled send time when a rate
// is set (so queueing in the client counts), else from its actual send time.
BenchResult RunBench(Client& client, const BenchOptions& options);
void PrintBenchText(const BenchOptions& options, const BenchResult& result, std::ostream& out);
void PrintBenchJson(const BenchOptions& options, const BenchResult& result, std::ostream& out);
// Rows sampled per request: --rows, or in dataset mode the rows drawn or the whole dataset's.
int64_t RowsPerRequest(const BenchOptions& options);
// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
std::string JsonQuote(const std::string& s);

}  // namespace gpusampler::client
