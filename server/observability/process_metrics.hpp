// The Prometheus process metrics (process_resident_memory_bytes, process_virtual_memory_bytes,
// process_cpu_seconds_total, process_open_fds, process_max_fds, process_start_time_seconds),
// read from /proc at scrape time, as the Prometheus client libraries' process collectors do.
// prometheus-cpp has none. Thread-safe.
#pragma once

#include <prometheus/collectable.h>

#include <memory>

namespace gpusampler::server {

std::shared_ptr<prometheus::Collectable> MakeProcessCollector();

}  // namespace gpusampler::server
