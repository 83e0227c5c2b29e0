// No zombie (issue 31, item 3): the process's file-descriptor limit and a self-check that
// the gRPC port still accepts connections. gRPC does not re-arm its listener after
// accept4() fails with EMFILE (grpc/grpc#20418), so a replica that ran out of descriptors
// once can keep answering its probes while refusing every new connection; the self-check
// makes /readyz and then /healthz say so, and Kubernetes restarts the pod.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gpusampler::server {

struct FdLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};
// Raises the soft RLIMIT_NOFILE to the hard limit (idle connections are cheap in memory,
// but each holds a descriptor); returns the limits in force afterwards.
FdLimit RaiseFdLimit();

// True when a new TCP connection to host:port is accepted by the server within `timeout`:
// the connection is made, an HTTP/2 client preface is sent, and the server answers anything
// or closes it (a TLS port closes it; a port whose listener stopped accepting leaves the
// connection in the kernel's backlog, unanswered). False also when no socket can be made
// (this process is out of descriptors itself).
bool AcceptsConnections(const std::string& host, int port, std::chrono::milliseconds timeout);

// The same answer without sending a byte, for a TLS port (where bytes that are not a TLS
// handshake make gRPC log an error each time): the connection is made, and accepted when the
// accept queue of the port's listening socket (/proc/net/tcp, tcp6) is empty at some moment
// within `timeout`; a listener that stopped accepting keeps the connection queued.
bool AcceptsQuietly(const std::string& host, int port, std::chrono::milliseconds timeout);

// The host the self-check connects to for a listen address: its host, or the loopback
// address for a wildcard (0.0.0.0, [::], an empty host).
std::string SelfCheckHost(const std::string& listen_address);

// Runs `check` every `period` on its own thread. After one failed check `ready()` is false;
// after `dead_after` consecutive failures `alive()` is false too; one success restores both.
// `report(ready, alive)` is called after every check. Thread-safe.
class AcceptWatch {
 public:
  using Report = std::function<void(bool ready, bool alive)>;
  AcceptWatch(std::function<bool()> check, std::chrono::milliseconds period, int dead_after,
              Report report);
  ~AcceptWatch();  // stops the thread
  AcceptWatch(const AcceptWatch&) = delete;
  AcceptWatch& operator=(const AcceptWatch&) = delete;

  bool ready() const { return failures_.load() == 0; }
  bool alive() const { return failures_.load() < dead_after_; }
  int64_t failed_checks() const { return failed_checks_.load(); }

 private:
  void Loop();

  const std::function<bool()> check_;
  const Report report_;
  const std::chrono::milliseconds period_;
  const int dead_after_;
  std::atomic<int> failures_{0};           // consecutive failed checks
  std::atomic<int64_t> failed_checks_{0};  // all failed checks
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpusampler::server
