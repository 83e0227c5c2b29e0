#include "observability/process_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

namespace gpusampler::server {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

// Seconds since the epoch at which the system booted (/proc/stat btime).
double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

class ProcessCollector final : public prometheus::Collectable {
 public:
  ProcessCollector()
      : ticks_(static_cast<double>(sysconf(_SC_CLK_TCK))),
        page_(static_cast<double>(sysconf(_SC_PAGESIZE))),
        boot_time_(BootTime()) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    // /proc/self/stat: the command name (field 2) may hold spaces; fields after its closing
    // parenthesis are space-separated: state is field 3, utime 14, stime 15, starttime 22.
    std::ifstream stat_in("/proc/self/stat");
    const std::string stat((std::istreambuf_iterator<char>(stat_in)),
                           std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos) {
      std::istringstream fields(stat.substr(paren + 2));
      std::vector<std::string> f((std::istream_iterator<std::string>(fields)),
                                 std::istream_iterator<std::string>());
      if (f.size() > 19) {
        const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks_;  // utime + stime
        out.push_back(Family("process_cpu_seconds_total",
                             "Total user and system CPU time spent in seconds.",
                             prometheus::MetricType::Counter, cpu));
        out.push_back(Family(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            prometheus::MetricType::Gauge, boot_time_ + std::stod(f[19]) / ticks_));
      }
    }
    std::ifstream statm("/proc/self/statm");
    double size_pages = 0, resident_pages = 0;
    if (statm >> size_pages >> resident_pages) {
      out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                           prometheus::MetricType::Gauge, resident_pages * page_));
      out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                           prometheus::MetricType::Gauge, size_pages * page_));
    }
    out.push_back(Family("process_open_fds", "Number of open file descriptors.",
                         prometheus::MetricType::Gauge, OpenFds()));
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      out.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                           prometheus::MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
    }
    return out;
  }

 private:
  const double ticks_;
  const double page_;
  const double boot_time_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeProcessCollector() {
  return std::make_shared<ProcessCollector>();
}

}  // namespace gpusampler::server
