#include "lifecycle/accept_check.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpusampler::server {

FdLimit RaiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      spdlog::info("file descriptor limit raised from {} to the hard limit {}", limit.rlim_cur,
                   limit.rlim_max);
      limit = raised;
    } else {
      spdlog::warn("cannot raise the file descriptor limit {} to the hard limit {}: {}",
                   limit.rlim_cur, limit.rlim_max, std::strerror(errno));
    }
  }
  return {static_cast<uint64_t>(limit.rlim_cur), static_cast<uint64_t>(limit.rlim_max)};
}

std::string SelfCheckHost(const std::string& listen_address) {
  std::string host = listen_address;
  if (host.rfind("ipv4:", 0) == 0) host = host.substr(5);
  if (host.rfind("ipv6:", 0) == 0) host = host.substr(5);
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host = host.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

namespace {

// A connected, non-blocking socket to host:port, or -1 (the reason is logged at debug).
int Connect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    spdlog::debug("self-check: no socket: {}", std::strerror(errno));
    freeaddrinfo(found);
    return -1;
  }
  const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int error = 0;
  socklen_t len = sizeof(error);
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace {

// The accept queue of the listening socket(s) on `port`, summed; -1 when none is found.
int64_t AcceptQueue(int port) {
  int64_t total = -1;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues;
      fields >> slot >> local >> remote >> state >> queues;
      const size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: TCP_LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) != port) continue;
      const size_t q = queues.find(':');
      if (q == std::string::npos) continue;
      total = std::max<int64_t>(total, 0) + std::strtoll(queues.c_str() + q + 1, nullptr, 16);
    }
  }
  return total;
}

}  // namespace

bool AcceptsQuietly(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  const int fd = Connect(host, port, timeout);
  if (fd < 0) return false;
  bool accepted = false;
  while (!accepted) {
    const int64_t queued = AcceptQueue(port);
    accepted = queued <= 0;  // -1: no listener visible here (another namespace): trust it
    if (accepted || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  close(fd);
  return accepted;
}

bool AcceptsConnections(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  const int fd = Connect(host, port, timeout);
  if (fd < 0) return false;
  // The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server that accepted the
  // connection answers with its SETTINGS; a TLS server closes it.
  static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
  const ssize_t sent = send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL);
  bool answered = false;
  if (sent > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) == 1) {
      char buffer[64];
      const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
      // Bytes, an orderly close or a reset: all mean that the server took the connection.
      answered = got >= 0 || errno == ECONNRESET;
    }
  } else {
    answered = errno == ECONNRESET || errno == EPIPE;  // closed at once: accepted
  }
  close(fd);
  return answered;
}

AcceptWatch::AcceptWatch(std::function<bool()> check, std::chrono::milliseconds period,
                         int dead_after, Report report)
    : check_(std::move(check)),
      report_(std::move(report)),
      period_(period),
      dead_after_(dead_after) {
  thread_ = std::thread([this] { Loop(); });
}

AcceptWatch::~AcceptWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AcceptWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    const bool ok = check_();
    lock.lock();
    if (stop_) break;
    if (ok) {
      if (failures_.exchange(0) > 0) {
        spdlog::warn("self-check: the gRPC port accepts connections again; ready");
      }
      if (report_) report_(true, true);
      continue;
    }
    failed_checks_.fetch_add(1);
    const int failures = failures_.fetch_add(1) + 1;
    if (failures == 1) {
      spdlog::error(
          "self-check: the gRPC port did not accept a new connection (out of file "
          "descriptors?); /readyz now fails, /healthz after {} failed checks",
          dead_after_);
    } else if (failures == dead_after_) {
      spdlog::critical(
          "self-check: the gRPC port has not accepted a connection in {} checks; /healthz "
          "now fails (gRPC does not resume accepting after EMFILE: restart the process)",
          failures);
    }
    if (report_) report_(ready(), alive());
  }
}

}  // namespace gpusampler::server
