// Background threads (repository loads, listings, the directory poller) run at the lowest
// priority relative to the process, so that the threads that answer take the CPU first.
#include "core/thread_priority.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace gpusampler::server {
namespace {

int NiceOfThisThread() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

TEST(ThreadPriorityTest, ABackgroundThreadRunsAtTheLowestPriorityTheOthersKeepTheirs) {
  const int base = NiceOfThisThread();
  ASSERT_EQ(errno, 0);
  int background = 0;
  int inherited = 0;
  std::thread t([&] {
    LowerThisThreadsPriority();
    background = NiceOfThisThread();
    std::thread child([&] { inherited = NiceOfThisThread(); });  // threads it starts inherit it
    child.join();
  });
  t.join();
  EXPECT_EQ(background, std::min(19, base + 19));  // the lowest there is
  EXPECT_EQ(inherited, background);
  EXPECT_EQ(NiceOfThisThread(), base);  // the caller's thread is untouched
}

}  // namespace
}  // namespace gpusampler::server
