// Issue 31, item 3: the gRPC port's own listener. At most --max-connections connections are
// open at once (one beyond is closed as soon as it is accepted), a connection counts until
// its descriptor is closed, and running out of descriptors refuses connections without
// stopping the listener (gRPC's own stops for good: grpc/grpc#20418). The end-to-end cases,
// a real server under a low ulimit, are in tests/python/test_fd_exhaustion.py.
#include "lifecycle/listener.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpusampler::server {
namespace {

using std::chrono::milliseconds;

// A client socket connected to 127.0.0.1:port (blocking), or -1.
int Connect(int port, int family = AF_INET) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc = -1;
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    a.sin6_addr = in6addr_loopback;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed (or reset) the client's connection within `timeout`.
bool ClosedByServer(int fd, milliseconds timeout = milliseconds(3000)) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  char byte = 0;
  const ssize_t got = recv(fd, &byte, 1, 0);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

// What the test's stand-in for gRPC received: the handed-over descriptors, owned here.
struct Handed {
  std::mutex mu;
  std::vector<int> fds;
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return fds.size();
  }
  int take(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return fds.at(i);
  }
  ~Handed() {
    for (const int fd : fds) close(fd);
  }
};

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(3000)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

std::unique_ptr<ConnectionListener> Started(int64_t max_connections, Handed* handed,
                                            const std::string& address = "127.0.0.1:0") {
  std::unique_ptr<ConnectionListener> l;
  const Status s = ConnectionListener::Open(address, &l);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return nullptr;
  l->Start(max_connections,
           [handed](int, int fd) {
             std::lock_guard<std::mutex> lock(handed->mu);
             handed->fds.push_back(fd);
           },
           {});
  return l;
}

TEST(ListenerTest, HandsEachConnectionOverNonBlocking) {
  Handed handed;
  auto l = Started(8, &handed);
  ASSERT_NE(l, nullptr);
  ASSERT_GT(l->port(), 0);
  const int a = Connect(l->port());
  const int b = Connect(l->port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 2; }));
  EXPECT_EQ(l->open_connections(), 2);
  EXPECT_NE(fcntl(handed.take(0), F_GETFL) & O_NONBLOCK, 0);  // what gRPC's endpoint expects
  EXPECT_NE(fcntl(handed.take(0), F_GETFD) & FD_CLOEXEC, 0);
  // The bytes reach the handed-over socket.
  ASSERT_EQ(send(a, "x", 1, 0), 1);
  pollfd p{handed.take(0), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 3000), 1);
  EXPECT_EQ(l->refused(Refusal::kLimit), 0);
  close(a);
  close(b);
}

TEST(ListenerTest, AConnectionBeyondTheLimitIsClosedAndOneClosedMakesRoom) {
  Handed handed;
  std::atomic<int64_t> open_seen{0};
  std::atomic<int64_t> refusals_seen{0};
  std::unique_ptr<ConnectionListener> l;
  ASSERT_TRUE(ConnectionListener::Open("127.0.0.1:0", &l).ok());
  l->Start(2,
           [&handed](int, int fd) {
             std::lock_guard<std::mutex> lock(handed.mu);
             handed.fds.push_back(fd);
           },
           {[&](int64_t open) { open_seen = open; }, [&](Refusal) { ++refusals_seen; }});
  const int a = Connect(l->port());
  const int b = Connect(l->port());
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 2; }));
  const int c = Connect(l->port());  // the kernel completes it; the listener closes it
  ASSERT_GE(c, 0);
  EXPECT_TRUE(ClosedByServer(c));
  EXPECT_EQ(handed.count(), 2u);
  EXPECT_EQ(l->refused(Refusal::kLimit), 1);
  EXPECT_EQ(refusals_seen.load(), 1);
  EXPECT_EQ(open_seen.load(), 2);
  // "gRPC" closes one of its connections: the next one is taken (at the limit the count is
  // checked again when a connection arrives, at most every 10 ms, not only every second).
  const int first = handed.take(0);
  close(first);
  {
    std::lock_guard<std::mutex> lock(handed.mu);
    handed.fds.erase(handed.fds.begin());
  }
  std::this_thread::sleep_for(milliseconds(20));
  const int d = Connect(l->port());
  ASSERT_GE(d, 0);
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 2; }));
  EXPECT_FALSE(ClosedByServer(d, milliseconds(200)));
  EXPECT_EQ(l->open_connections(), 2);
  EXPECT_EQ(l->refused(Refusal::kLimit), 1);
  for (const int fd : {a, b, c, d}) close(fd);
}

TEST(ListenerTest, TheOpenCountFollowsClosesWithinASecond) {
  Handed handed;
  auto l = Started(100, &handed);
  ASSERT_NE(l, nullptr);
  std::vector<int> clients;
  for (int i = 0; i < 10; ++i) clients.push_back(Connect(l->port()));
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 10; }));
  EXPECT_EQ(l->open_connections(), 10);
  {
    std::lock_guard<std::mutex> lock(handed.mu);
    for (int i = 0; i < 6; ++i) close(handed.fds[i]);
    handed.fds.erase(handed.fds.begin(), handed.fds.begin() + 6);
  }
  // A descriptor number reused by something else (here a file) is not the connection.
  const int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_TRUE(WaitFor([&] { return l->open_connections() == 4; }, milliseconds(2500)));
  close(file);
  for (const int fd : clients) close(fd);
}

TEST(ListenerTest, OutOfDescriptorsRefusesAndKeepsAccepting) {
  Handed handed;
  auto l = Started(1000, &handed);
  ASSERT_NE(l, nullptr);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Client sockets are made before the descriptors run out (connect needs none).
  const int starved = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(starved, 0);
  // One warning through spdlog first, while descriptors are there: UBSan checks the dynamic
  // type of the logger, its sinks and formatters at their first call and caches the answer,
  // and a check that runs under EMFILE fails (its runtime probes memory through a pipe it can
  // no longer open) and aborts the sanitizer build's run. The server logs at start, so only
  // this test reached the listener's warning with nothing logged before.
  spdlog::warn("listener test: descriptors run out next (soft limit {})",
               std::min<rlim_t>(saved.rlim_cur, 4096));
  // Take every descriptor under a low soft limit.
  std::vector<int> hog;
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 4096);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  while (true) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    hog.push_back(fd);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(l->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(starved, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const bool closed = ClosedByServer(starved);
  const int64_t refused = l->refused(Refusal::kDescriptors);
  for (const int fd : hog) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_TRUE(closed) << "the connection stayed queued (a dead listener)";
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(handed.count(), 0u);
  // Descriptors are back: the listener still accepts.
  const int next = Connect(l->port());
  ASSERT_GE(next, 0);
  EXPECT_TRUE(WaitFor([&] { return handed.count() == 1; }));
  close(next);
  close(starved);
}

TEST(ListenerTest, StopClosesTheListeningSockets) {
  Handed handed;
  auto l = Started(8, &handed);
  ASSERT_NE(l, nullptr);
  const int port = l->port();
  l->Stop();
  l->Stop();  // idempotent
  EXPECT_LT(Connect(port), 0);
}

TEST(ListenerTest, AddressesAndTheirErrors) {
  std::unique_ptr<ConnectionListener> l;
  for (const char* bad :
       {"nonsense", "1.2.3.4", "::1:80", "127.0.0.1:70000", "127.0.0.1:x", "[::1]80"}) {
    const Status s = ConnectionListener::Open(bad, &l);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--address"), std::string::npos) << s.message();
  }
  // A wildcard takes loopback connections of both families (IPv6 where the host has it).
  Handed handed;
  auto any = Started(8, &handed, "0.0.0.0:0");
  ASSERT_NE(any, nullptr);
  const int v4 = Connect(any->port());
  EXPECT_GE(v4, 0);
  const int v6 = Connect(any->port(), AF_INET6);
  EXPECT_TRUE(WaitFor([&] { return handed.count() == (v6 >= 0 ? 2u : 1u); }));
  if (v4 >= 0) close(v4);
  if (v6 >= 0) close(v6);
  // A name listens on each of its addresses, on one port; ipv4: prefixes are accepted.
  Handed named;
  auto local = Started(8, &named, "localhost:0");
  ASSERT_NE(local, nullptr);
  const int c = Connect(local->port());
  EXPECT_GE(c, 0);
  if (c >= 0) close(c);
  Handed prefixed;
  EXPECT_NE(Started(8, &prefixed, "ipv4:127.0.0.1:0"), nullptr);
  // A port in use fails (no SO_REUSEPORT), naming the address.
  const std::string taken = "127.0.0.1:" + std::to_string(local->port());
  const Status s = ConnectionListener::Open(taken, &l);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("cannot listen on " + taken), std::string::npos) << s.message();
}

TEST(ListenerTest, MaxConnectionsLeavesAReserveOfTheDescriptorLimit) {
  EXPECT_EQ(MaxConnectionsFor(1024), 768);
  EXPECT_EQ(MaxConnectionsFor(192), 128);  // a reserve of at least 64
  EXPECT_EQ(MaxConnectionsFor(65), 1);
  EXPECT_EQ(MaxConnectionsFor(10), 1);   // never 0
  EXPECT_EQ(MaxConnectionsFor(0), 768);  // unknown: Linux's default of 1024
  EXPECT_EQ(MaxConnectionsFor(1048576), 786432);
  EXPECT_GT(MaxConnectionsFor(~uint64_t{0}), int64_t{1} << 60);  // RLIM_INFINITY
}

}  // namespace
}  // namespace gpusampler::server
