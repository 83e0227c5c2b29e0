#include "core/thread_priority.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace gpusampler::server {

void LowerThisThreadsPriority(int increment) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && setpriority(PRIO_PROCESS, tid, now + increment) == 0) return;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    spdlog::warn("background threads keep the process's priority: setpriority: {}",
                 std::strerror(errno));
  }
}

}  // namespace gpusampler::server
