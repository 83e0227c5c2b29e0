// LD_PRELOAD shim for the TSan runs (.ci/sanitizers.sh): tells ThreadSanitizer about the one
// happens-before edge that gRPC's C API promises and that TSan cannot see in Debian's
// uninstrumented libgrpc: everything a thread did before handing a tag to gRPC
// (grpc_call_start_batch, grpc_server_request_call, grpc_server_request_registered_call)
// happens before the thread that gets that tag back from the completion queue
// (grpc_completion_queue_next, grpc_completion_queue_pluck) runs the tag. libgrpc++ calls
// these C functions through the PLT, so the definitions here interpose on them: a release on
// the tag's address before the real call, an acquire on it after the real call returns it.
//
// In gRPC 1.51 callback services and clients run every completion (CallbackWithSuccessTag,
// CallbackWithStatusTag, the server's CallbackCallTag) on libgrpc++'s "nexting" threads
// that call grpc_completion_queue_next; sync clients pluck. Without this edge TSan reports
// the header-inlined grpcpp code (CallOpSet::FillOps / FinishOp, the std::function swaps of
// CallbackWithSuccessTag::Set / Run) and our reactors' own state as racing between the thread
// that started an operation and the one that completes it: ~1,000 reports per test binary,
// none real. With it, our code keeps full checking: a race between two of our threads, or
// between a worker thread and a reactor callback not ordered by a gRPC operation, is still
// reported.
//
// The server's OnDone and non-inline OnCancel reactions are the one hand-off that does not go
// through a completion queue: libgrpc++'s ServerCallbackCall::ScheduleOnDone and CallOnCancel
// post them to gRPC's internal executor, whose threads are invisible to TSan. The header-inlined
// MaybeDone / MaybeCallOnCancel call those two through the PLT, so they are interposed too, with
// the same bodies as gRPC 1.51's src/cpp/server/server_callback.cc except that the reaction runs
// on one executor thread of this shim (a release before queueing it, an acquire before running
// it) instead of gRPC's. Inline reactions stay inline, exactly as in gRPC.
//
// absl::Mutex and absl::CondVar (Debian's abseil, inline namespace absl::debian3) synchronize
// gRPC itself and the grpcpp headers (grpc::internal::Mutex: e.g. ServerUnaryReactor's
// backlog when Finish comes before the reactor is bound, from one of our worker threads). Their
// exported Lock/Unlock/TryLock/ReaderLock/ReaderUnlock and CondVar::Wait* are interposed too: a
// lock acquires the mutex's address, an unlock releases it, a wait releases then reacquires.
//
// Last, server shutdown: grpc::Server::Wait and ShutdownInternal return once every call's
// CallOnDone has dropped its call (grpc_call_unref, after the reactor's OnDone) and signalled the
// server through an absl::CondVar TSan cannot see. grpc_call_unref releases a process-wide token
// and those two acquire it when they return, so tearing the service down after Wait is ordered
// after every OnDone.
//
// __tsan_acquire/__tsan_release are weak: in a process not built with TSan (a child process
// such as promtool) they are null and the shim only forwards.
//
// Build: clang++ -shared -fPIC -O1 tests/sanitizers/tsan_grpc_sync.cc -o libtsan_grpc_sync.so -ldl
#include <dlfcn.h>
#include <grpc/grpc.h>
#include <grpcpp/server.h>
#include <grpcpp/support/server_callback.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

extern "C" {
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

template <typename Fn>
Fn Next(const char* name) {
  static_assert(sizeof(Fn) == sizeof(void*));
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

void Release(void* tag) {
  if (__tsan_release != nullptr && tag != nullptr) __tsan_release(tag);
}

void Acquire(const grpc_event& ev) {
  if (__tsan_acquire != nullptr && ev.type == GRPC_OP_COMPLETE && ev.tag != nullptr) {
    __tsan_acquire(ev.tag);
  }
}

char g_calls_unreffed;  // the token grpc_call_unref releases and Server::Wait acquires

// One thread that runs the server reactions posted below, in order, like a one-thread
// grpc_core::Executor. Leaked on purpose: it must outlive static destruction at exit.
class ShimExecutor {
 public:
  static ShimExecutor& Get() {
    static ShimExecutor* const e = new ShimExecutor;
    return *e;
  }
  void Run(void* sync, std::function<void()> fn) {
    Release(sync);
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.emplace_back(sync, std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  ShimExecutor() {
    std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    for (;;) {
      std::pair<void*, std::function<void()>> item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !q_.empty(); });
        item = std::move(q_.front());
        q_.pop_front();
      }
      if (__tsan_acquire != nullptr) __tsan_acquire(item.first);
      item.second();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<void*, std::function<void()>>> q_;
};

}  // namespace

namespace grpc::internal {

void ServerCallbackCall::ScheduleOnDone(bool inline_ondone) {
  // The last Unref may have run in libgrpc++ (the ServerContext's CompletionOp), out of TSan's
  // sight; acquire what the instrumented Unrefs released on the counter first.
  if (__tsan_acquire != nullptr) __tsan_acquire(&callbacks_outstanding_);
  if (inline_ondone) {
    CallOnDone();
    return;
  }
  ShimExecutor::Get().Run(this, [this] { CallOnDone(); });
}

void ServerCallbackCall::CallOnCancel(ServerReactor* reactor) {
  if (__tsan_acquire != nullptr) __tsan_acquire(&on_cancel_conditions_remaining_);
  if (reactor->InternalInlineable()) {
    reactor->OnCancel();
    return;
  }
  // As gRPC: a ref so the call outlives the reaction, dropped by MaybeDone after it.
  Ref();
  ShimExecutor::Get().Run(this, [this, reactor] {
    reactor->OnCancel();
    MaybeDone();
  });
}

}  // namespace grpc::internal

namespace grpc {

void Server::Wait() {
  using Fn = void (*)(Server*);
  static const Fn real = Next<Fn>("_ZN4grpc6Server4WaitEv");
  real(this);
  if (__tsan_acquire != nullptr) __tsan_acquire(&g_calls_unreffed);
}

void Server::ShutdownInternal(gpr_timespec deadline) {
  using Fn = void (*)(Server*, gpr_timespec);
  static const Fn real = Next<Fn>("_ZN4grpc6Server16ShutdownInternalE12gpr_timespec");
  real(this, deadline);
  if (__tsan_acquire != nullptr) __tsan_acquire(&g_calls_unreffed);
}

}  // namespace grpc

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  using Fn = grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*);
  static const Fn real = Next<Fn>("grpc_call_start_batch");
  Release(tag);
  return real(call, ops, nops, tag, reserved);
}

void grpc_call_unref(grpc_call* call) {
  using Fn = void (*)(grpc_call*);
  static const Fn real = Next<Fn>("grpc_call_unref");
  Release(&g_calls_unreffed);
  real(call);
}

grpc_call_error grpc_server_request_call(grpc_server* server, grpc_call** call,
                                         grpc_call_details* details,
                                         grpc_metadata_array* request_metadata,
                                         grpc_completion_queue* cq_bound_to_call,
                                         grpc_completion_queue* cq_for_notification,
                                         void* tag_new) {
  using Fn =
      grpc_call_error (*)(grpc_server*, grpc_call**, grpc_call_details*, grpc_metadata_array*,
                          grpc_completion_queue*, grpc_completion_queue*, void*);
  static const Fn real = Next<Fn>("grpc_server_request_call");
  Release(tag_new);
  return real(server, call, details, request_metadata, cq_bound_to_call, cq_for_notification,
              tag_new);
}

grpc_call_error grpc_server_request_registered_call(grpc_server* server, void* registered_method,
                                                    grpc_call** call, gpr_timespec* deadline,
                                                    grpc_metadata_array* request_metadata,
                                                    grpc_byte_buffer** optional_payload,
                                                    grpc_completion_queue* cq_bound_to_call,
                                                    grpc_completion_queue* cq_for_notification,
                                                    void* tag_new) {
  using Fn = grpc_call_error (*)(grpc_server*, void*, grpc_call**, gpr_timespec*,
                                 grpc_metadata_array*, grpc_byte_buffer**, grpc_completion_queue*,
                                 grpc_completion_queue*, void*);
  static const Fn real = Next<Fn>("grpc_server_request_registered_call");
  Release(tag_new);
  return real(server, registered_method, call, deadline, request_metadata, optional_payload,
              cq_bound_to_call, cq_for_notification, tag_new);
}

// absl::debian3::Mutex / CondVar, by mangled name (absl::Duration and absl::Time are trivially
// copyable {int64_t, uint32_t}, passed by value like this struct).
struct AbslDuration {
  int64_t hi;
  uint32_t lo;
};

void _ZN4absl7debian35Mutex4LockEv(void* mu) {
  static const auto real = Next<void (*)(void*)>("_ZN4absl7debian35Mutex4LockEv");
  real(mu);
  if (__tsan_acquire != nullptr) __tsan_acquire(mu);
}

void _ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  static const auto real = Next<void (*)(void*)>("_ZN4absl7debian35Mutex10ReaderLockEv");
  real(mu);
  if (__tsan_acquire != nullptr) __tsan_acquire(mu);
}

bool _ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  static const auto real = Next<bool (*)(void*)>("_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(mu);
  if (locked && __tsan_acquire != nullptr) __tsan_acquire(mu);
  return locked;
}

void _ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  static const auto real = Next<void (*)(void*)>("_ZN4absl7debian35Mutex6UnlockEv");
  Release(mu);
  real(mu);
}

void _ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  static const auto real = Next<void (*)(void*)>("_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(mu);
  real(mu);
}

void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  static const auto real =
      Next<void (*)(void*, void*)>("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(cv, mu);
  if (__tsan_acquire != nullptr) __tsan_acquire(mu);
}

bool _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(void* cv, void* mu,
                                                                       AbslDuration t) {
  static const auto real = Next<bool (*)(void*, void*, AbslDuration)>(
      "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(cv, mu, t);
  if (__tsan_acquire != nullptr) __tsan_acquire(mu);
  return timed_out;
}

bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                          AbslDuration d) {
  static const auto real = Next<bool (*)(void*, void*, AbslDuration)>(
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(cv, mu, d);
  if (__tsan_acquire != nullptr) __tsan_acquire(mu);
  return timed_out;
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                      void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*);
  static const Fn real = Next<Fn>("grpc_completion_queue_next");
  grpc_event ev = real(cq, deadline, reserved);
  Acquire(ev);
  return ev;
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                       void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*);
  static const Fn real = Next<Fn>("grpc_completion_queue_pluck");
  grpc_event ev = real(cq, tag, deadline, reserved);
  Acquire(ev);
  return ev;
}

}  // extern "C"
