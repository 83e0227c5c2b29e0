// Issue 31, item 3: the self-check that fails /readyz and /healthz when the gRPC port stops
// accepting (AcceptsConnections, AcceptWatch) and the descriptor limit (RaiseFdLimit). The
// end-to-end case, a real server under a low ulimit, is tests/python/test_fd_exhaustion.py.
#include "lifecycle/accept_check.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpusampler::server {
namespace {

using std::chrono::milliseconds;

// A loopback listening socket on a free port; `port` is set.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(AcceptCheckTest, AServerThatAcceptsAndAnswersPasses) {
  int port = 0;
  const int listener = Listen(&port);
  std::thread server([listener] {
    const int conn = accept(listener, nullptr, nullptr);
    char buffer[64];
    ASSERT_GT(recv(conn, buffer, sizeof(buffer), 0), 0);  // the preface
    ASSERT_EQ(send(conn, "x", 1, MSG_NOSIGNAL), 1);
    close(conn);
  });
  EXPECT_TRUE(AcceptsConnections("127.0.0.1", port, milliseconds(2000)));
  server.join();
  close(listener);
}

TEST(AcceptCheckTest, AServerThatAcceptsAndClosesPasses) {
  int port = 0;
  const int listener = Listen(&port);
  std::thread server([listener] { close(accept(listener, nullptr, nullptr)); });
  EXPECT_TRUE(AcceptsConnections("127.0.0.1", port, milliseconds(2000)));
  server.join();
  close(listener);
}

TEST(AcceptCheckTest, AListenerThatNeverAcceptsFails) {
  // The kernel completes the handshake into the backlog, as for gRPC after EMFILE.
  int port = 0;
  const int listener = Listen(&port);
  EXPECT_FALSE(AcceptsConnections("127.0.0.1", port, milliseconds(300)));
  close(listener);
}

TEST(AcceptCheckTest, QuietCheckSeesTheAcceptQueue) {
  int port = 0;
  const int listener = Listen(&port);
  // Never accepted: the connection stays in the listener's queue.
  EXPECT_FALSE(AcceptsQuietly("127.0.0.1", port, milliseconds(300)));
  // Drain what the failed check left queued (its connection, now closed), then accept.
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop.load()) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 10) == 1) close(accept(listener, nullptr, nullptr));
    }
  });
  EXPECT_TRUE(AcceptsQuietly("127.0.0.1", port, milliseconds(2000)));
  stop = true;
  server.join();
  close(listener);
}

TEST(AcceptCheckTest, AClosedPortFails) {
  int port = 0;
  close(Listen(&port));
  EXPECT_FALSE(AcceptsConnections("127.0.0.1", port, milliseconds(300)));
}

TEST(AcceptCheckTest, SelfCheckHostOfListenAddresses) {
  EXPECT_EQ(SelfCheckHost("0.0.0.0:50051"), "127.0.0.1");
  EXPECT_EQ(SelfCheckHost("127.0.0.1:0"), "127.0.0.1");
  EXPECT_EQ(SelfCheckHost("[::]:50051"), "::1");
  EXPECT_EQ(SelfCheckHost("[::1]:7"), "::1");
  EXPECT_EQ(SelfCheckHost(":50051"), "127.0.0.1");
  EXPECT_EQ(SelfCheckHost("10.0.0.7:80"), "10.0.0.7");
}

TEST(AcceptCheckTest, WatchFailsReadyThenAliveAndRecovers) {
  std::atomic<bool> accepting{true};
  std::atomic<int> reports{0};
  AcceptWatch watch([&] { return accepting.load(); }, milliseconds(10), 3,
                    [&](bool, bool) { reports.fetch_add(1); });
  const auto wait_for = [&](auto done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return reports.load() > 0; }));
  EXPECT_TRUE(watch.ready());
  EXPECT_TRUE(watch.alive());
  accepting = false;
  ASSERT_TRUE(wait_for([&] { return !watch.ready(); }));
  ASSERT_TRUE(wait_for([&] { return !watch.alive(); }));
  EXPECT_GE(watch.failed_checks(), 3);
  accepting = true;
  ASSERT_TRUE(wait_for([&] { return watch.ready() && watch.alive(); }));
}

TEST(AcceptCheckTest, SoftLimitIsRaisedToTheHardLimit) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit lowered = before;
  lowered.rlim_cur = std::min<rlim_t>(before.rlim_max, 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const FdLimit after = RaiseFdLimit();
  EXPECT_EQ(after.soft, static_cast<uint64_t>(before.rlim_max));
  EXPECT_EQ(after.hard, static_cast<uint64_t>(before.rlim_max));
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, before.rlim_max);
  setrlimit(RLIMIT_NOFILE, &before);
}

}  // namespace
}  // namespace gpusampler::server
