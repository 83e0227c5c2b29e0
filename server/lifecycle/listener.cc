#include "lifecycle/listener.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace gpusampler::server {
namespace {

constexpr int kWildcardFamilies = 2;
// A refusal is logged at most once per this many seconds (a flood would fill the log).
constexpr int64_t kLogEveryNs = int64_t{10} * 1000 * 1000 * 1000;
// While at the limit, the open count is re-checked at most this often.
constexpr int64_t kSweepAtLimitNs = int64_t{10} * 1000 * 1000;
constexpr int kSweepEveryMs = 1000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// host and port of `address`, or false with `error` set.
bool SplitAddress(std::string address, std::string* host, std::string* port, std::string* error) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (address.rfind(scheme, 0) == 0) address = address.substr(std::strlen(scheme));
  }
  size_t port_at = std::string::npos;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      *error = "'" + address + "' is not [ipv6]:port";
      return false;
    }
    *host = address.substr(1, close - 1);
    port_at = close + 2;
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon) {
      *error = "'" + address + "' is not host:port (an IPv6 address goes in brackets)";
      return false;
    }
    *host = address.substr(0, colon);
    port_at = colon + 1;
  }
  *port = address.substr(port_at);
  const bool digits =
      !port->empty() && port->size() <= 5 &&
      std::all_of(port->begin(), port->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(*port) > 65535) {
    *error = "port '" + *port + "' is not a number in [0, 65535]";
    return false;
  }
  return true;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return 0;
  if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void SetPort(sockaddr* addr, int port) {
  if (addr->sa_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(static_cast<uint16_t>(port));
  }
}

// A listening socket on `addr`, or -1 with errno set. `dual`: an IPv6 socket that also takes
// IPv4 (the wildcard); otherwise IPv6 sockets take IPv6 only, so that the same port can be
// bound on the IPv4 address of the same name.
int ListenOn(const sockaddr* addr, socklen_t len, bool dual) {
  const int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  const int v6only = dual ? 0 : 1;
  bool ok = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0;
  if (ok && addr->sa_family == AF_INET6) {
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) == 0;
  }
  ok = ok && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0;
  ok = ok && bind(fd, addr, len) == 0 && listen(fd, SOMAXCONN) == 0;
  if (!ok) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

int64_t MaxConnectionsFor(uint64_t fd_soft_limit) {
  if (fd_soft_limit == 0) fd_soft_limit = 1024;  // the limit could not be read: Linux's default
  const int64_t limit = static_cast<int64_t>(std::min<uint64_t>(fd_soft_limit, INT64_MAX / 2));
  return std::max<int64_t>(1, limit - std::max<int64_t>(64, limit / 4));
}

Status ConnectionListener::Open(const std::string& address,
                                std::unique_ptr<ConnectionListener>* out) {
  std::string host, port, error;
  if (!SplitAddress(address, &host, &port, &error)) {
    return InvalidArgument("--address: " + error);
  }
  std::unique_ptr<ConnectionListener> l(new ConnectionListener());
  auto fail = [&](const std::string& why) {
    for (const int fd : l->sockets_) close(fd);
    return Unavailable("cannot listen on " + address + ": " + why);
  };
  const int wanted = std::stoi(port);
  if (host.empty() || host == "0.0.0.0" || host == "::") {
    // Every family: one IPv6 socket that takes IPv4 too, else IPv4 alone (no IPv6 here).
    for (int family = 0; family < kWildcardFamilies && l->sockets_.empty(); ++family) {
      sockaddr_storage any{};
      socklen_t len = 0;
      if (family == 0) {
        auto* a6 = reinterpret_cast<sockaddr_in6*>(&any);
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_any;
        len = sizeof(sockaddr_in6);
      } else {
        auto* a4 = reinterpret_cast<sockaddr_in*>(&any);
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        len = sizeof(sockaddr_in);
      }
      SetPort(reinterpret_cast<sockaddr*>(&any), wanted);
      const int fd = ListenOn(reinterpret_cast<sockaddr*>(&any), len, family == 0);
      if (fd >= 0) {
        l->sockets_.push_back(fd);
      } else if (errno != EAFNOSUPPORT && errno != EADDRNOTAVAIL) {
        return fail(std::strerror(errno));
      }
    }
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      return fail(gai_strerror(rc));
    }
    std::vector<std::string> seen;  // getaddrinfo may name an address twice
    int chosen = wanted;
    std::string last_error = "no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      std::string key(reinterpret_cast<const char*>(a->ai_addr), a->ai_addrlen);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      SetPort(a->ai_addr, chosen);
      const int fd = ListenOn(a->ai_addr, a->ai_addrlen, false);
      if (fd < 0) {
        last_error = std::strerror(errno);
        if (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL) continue;  // no such family here
        freeaddrinfo(found);
        return fail(last_error);
      }
      if (chosen == 0) chosen = BoundPort(fd);
      l->sockets_.push_back(fd);
    }
    freeaddrinfo(found);
    if (l->sockets_.empty()) return fail(last_error);
  }
  if (l->sockets_.empty()) return fail("no address family is available");
  l->port_ = BoundPort(l->sockets_.front());
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  l->reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->wake_fd_ < 0 || l->reserve_fd_ < 0 || l->port_ == 0) {
    const std::string why = std::strerror(errno);
    if (l->wake_fd_ >= 0) close(l->wake_fd_);
    if (l->reserve_fd_ >= 0) close(l->reserve_fd_);
    l->wake_fd_ = l->reserve_fd_ = -1;
    return fail(why);
  }
  *out = std::move(l);
  return Status::Ok();
}

ConnectionListener::~ConnectionListener() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (reserve_fd_ >= 0) close(reserve_fd_);
}

void ConnectionListener::Start(int64_t max_connections, Hand hand, Hooks hooks) {
  max_connections_ = std::max<int64_t>(1, max_connections);
  hand_ = std::move(hand);
  hooks_ = std::move(hooks);
  thread_ = std::thread([this] { Loop(); });
}

void ConnectionListener::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof(one));
    (void)ignored;
    thread_.join();
  }
  for (const int fd : sockets_) close(fd);
  sockets_.clear();
}

void ConnectionListener::Loop() {
  std::vector<pollfd> polled;
  for (const int fd : sockets_) polled.push_back({fd, POLLIN, 0});
  polled.push_back({wake_fd_, POLLIN, 0});
  int64_t next_sweep_ns = NowNs() + int64_t{kSweepEveryMs} * 1000 * 1000;
  while (true) {
    const int ready = poll(polled.data(), polled.size(), kSweepEveryMs);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("gRPC listener: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (polled.back().revents != 0) return;  // Stop()
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents != 0) AcceptAll(polled[i].fd);
    }
    if (NowNs() >= next_sweep_ns) {
      Sweep();
      next_sweep_ns = NowNs() + int64_t{kSweepEveryMs} * 1000 * 1000;
    }
  }
}

void ConnectionListener::AcceptAll(int listener_fd) {
  while (true) {
    const int fd = accept4(listener_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: give up the reserve to take the connection off the queue and
        // close it, so that the client learns at once and the listener stays armed (gRPC's
        // would stop here for good). The reserve is taken back for the next time.
        if (reserve_fd_ >= 0) {
          close(reserve_fd_);
          reserve_fd_ = -1;
          const int taken = accept4(listener_fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (taken >= 0) Refuse(taken, Refusal::kDescriptors);
          reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (taken >= 0) continue;
        }
        Sweep();  // connections may have closed meanwhile
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
      }
      // ENOBUFS, ENOMEM and the like: transient; poll again shortly.
      spdlog::warn("gRPC listener: accept failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (open_.load(std::memory_order_relaxed) >= max_connections_ &&
        NowNs() - last_sweep_ns_ >= kSweepAtLimitNs) {
      Sweep();
    }
    if (open_.load(std::memory_order_relaxed) >= max_connections_) {
      Refuse(fd, Refusal::kLimit);
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (static_cast<size_t>(fd) >= held_.size()) {
      held_.resize(std::max<size_t>(static_cast<size_t>(fd) + 1, held_.size() * 2));
    }
    // A descriptor number handed over before and now reused: that connection is closed.
    const bool reused = held_[fd].ino != 0;
    held_[fd] = Held{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    if (!reused) open_.fetch_add(1, std::memory_order_relaxed);
    if (hooks_.on_open) hooks_.on_open(open_.load(std::memory_order_relaxed));
    hand_(listener_fd, fd);
  }
}

void ConnectionListener::Refuse(int fd, Refusal why) {
  // Counted, and the hook told, before the close, so that whoever sees the connection close
  // sees the count (the metric included).
  const int w = static_cast<int>(why);
  const int64_t total = refused_[w].fetch_add(1, std::memory_order_relaxed) + 1;
  if (hooks_.on_refused) hooks_.on_refused(why);
  close(fd);
  const int64_t now = NowNs();
  if (now - last_log_ns_[w] < kLogEveryNs) return;
  last_log_ns_[w] = now;
  if (why == Refusal::kLimit) {
    spdlog::warn(
        "gRPC listener: closed a new connection: {} connections are open (--max-connections "
        "{}); {} refused so far",
        open_.load(std::memory_order_relaxed), max_connections_, total);
  } else {
    spdlog::warn(
        "gRPC listener: out of file descriptors (EMFILE): closed a new connection; {} refused "
        "so far (raise the limit, or lower --max-connections below it)",
        total);
  }
}

void ConnectionListener::Sweep() {
  last_sweep_ns_ = NowNs();
  int64_t open = 0;
  for (size_t fd = 0; fd < held_.size(); ++fd) {
    Held& h = held_[fd];
    if (h.ino == 0) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || static_cast<uint64_t>(st.st_ino) != h.ino ||
        static_cast<uint64_t>(st.st_dev) != h.dev) {
      h = Held{};
      continue;
    }
    ++open;
  }
  if (open != open_.exchange(open, std::memory_order_relaxed) && hooks_.on_open) {
    hooks_.on_open(open);
  }
}

}  // namespace gpusampler::server
