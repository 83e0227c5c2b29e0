// The gRPC port's own listener (issue 31, item 3): at most --max-connections connections at
// once, and a listener that outlives running out of file descriptors.
//
// gRPC 1.51's listener has no connection limit (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS
// came later) and stops accepting for good after one accept4() EMFILE (grpc/grpc#20418).
// So the server listens itself and hands each accepted socket to gRPC through
// ServerBuilder's external connection acceptor, which runs the same transport and the same
// credentials (TLS, mTLS) as gRPC's own listener would.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.hpp"

namespace gpusampler::server {

// Why a connection was closed as soon as it was accepted.
enum class Refusal {
  kLimit = 0,        // --max-connections were open
  kDescriptors = 1,  // the process was out of file descriptors (EMFILE, ENFILE)
};

class ConnectionListener {
 public:
  // Takes a connected, non-blocking socket and owns it from then on.
  using Hand = std::function<void(int listener_fd, int fd)>;
  // Called on the accept thread: the open count after it changed; a refusal.
  struct Hooks {
    std::function<void(int64_t open)> on_open;
    std::function<void(Refusal)> on_refused;
  };

  // Binds and listens on `address`: host:port, [v6]:port, optionally prefixed ipv4: or
  // ipv6:. A wildcard host (empty, 0.0.0.0, ::) listens on every address family; a name
  // listens on each of its addresses. Port 0 picks one, shared by all the sockets. No
  // SO_REUSEPORT: a port in use fails (UNAVAILABLE, "cannot listen on").
  static Status Open(const std::string& address, std::unique_ptr<ConnectionListener>* out);
  ~ConnectionListener();  // Stop()
  ConnectionListener(const ConnectionListener&) = delete;
  ConnectionListener& operator=(const ConnectionListener&) = delete;

  int port() const { return port_; }

  // Starts the accept thread. A connection accepted while `max_connections` handed-over
  // connections are still open is closed at once (the client sees the connection close
  // and retries: UNAVAILABLE); so is one accepted only by giving up the descriptor kept in
  // reserve for that, when the process is out of descriptors. Call once.
  void Start(int64_t max_connections, Hand hand, Hooks hooks);
  // Stops accepting and closes the listening sockets; connections already handed over stay.
  // Idempotent; joins the thread.
  void Stop();

  // Handed-over connections open as of the last check (thread-safe). A connection counts
  // until its descriptor is closed; the accept thread checks every second, and when a
  // connection arrives at the limit (at most every 10 ms: a flood is refused without a
  // check per connection).
  int64_t open_connections() const { return open_.load(std::memory_order_relaxed); }
  int64_t refused(Refusal why) const {
    return refused_[static_cast<int>(why)].load(std::memory_order_relaxed);
  }

 private:
  ConnectionListener() = default;
  void Loop();
  void AcceptAll(int listener_fd);
  void Refuse(int fd, Refusal why);
  // Drops the connections whose descriptor no longer refers to the socket handed over.
  void Sweep();

  struct Held {
    uint64_t dev = 0;
    uint64_t ino = 0;  // 0: nothing handed over on this descriptor
  };

  std::vector<int> sockets_;  // listening
  int port_ = 0;
  int wake_fd_ = -1;     // eventfd: Stop()
  int reserve_fd_ = -1;  // /dev/null, given up to accept-and-close when out of descriptors
  int64_t max_connections_ = 0;
  Hand hand_;
  Hooks hooks_;
  std::vector<Held> held_;  // by descriptor; accept thread only
  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> refused_[2] = {};
  int64_t last_sweep_ns_ = 0;
  int64_t last_log_ns_[2] = {};
  std::thread thread_;
};

// --max-connections when it is 0 (auto), and the most it may be: the soft descriptor limit
// less a reserve for everything else the process opens (dataset files, the metrics port's
// connections, gRPC's own descriptors): a quarter of the limit, at least 64.
int64_t MaxConnectionsFor(uint64_t fd_soft_limit);

}  // namespace gpusampler::server
