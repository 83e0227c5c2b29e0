// The host executor of the GPU pipeline ("cuda-sim"): pipeline.hpp's bodies run here block
// by block, and inside a block phase by phase; within a phase the threads run one after the
// other in a scrambled order (so a body whose threads depend on each other inside a phase
// gives wrong answers here too). Counts launches, global bytes, shared-memory bytes and
// Philox calls, and checks what a GPU would get wrong or reject:
//   - a shared-memory race: two threads of one phase touching one byte of shared memory, at
//     least one of them with a plain store (atomics against atomics, and reads against
//     reads, are fine); or a store in the phase right after a uniform read of the byte
//     outside a phase (with no barrier between, a slow thread may not have read it yet);
//   - a misaligned global access (a T* not aligned to sizeof(T): the GPU faults);
//   - a read of launch scratch that this launch has not written: Exec::Scratch() marks the
//     arena unwritten and fills it with a poison pattern when a launch begins, so a body
//     that reads scratch left over from an earlier launch fails here (on a GPU it would read
//     stale values and agree by luck).
// Each check throws std::logic_error: they are bugs in a body, never bad input.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gpusampler/kernels/types.hpp"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels::sim {

// Visit order of threads within a phase: a fixed permutation of [0, kThreads).
inline int ThreadAt(int k) { return (k * 97 + 13) % pipeline::kThreads; }

inline constexpr uint8_t kPoison = 0xA5;
// The device's shared window starts well aligned; the simulator places a block's shared object
// on such a boundary, so that every member's alignment is its offset's, as on the GPU.
inline constexpr size_t kSharedBaseAlign = 128;

// Bytes of launch scratch [begin, begin + bytes) not yet written in the current launch.
class ScratchShadow {
 public:
  void Reset(uint8_t* begin, size_t bytes) {
    begin_ = begin;
    bytes_ = bytes;
    written_.assign((bytes + 63) / 64, 0);
    if (bytes > 0) std::memset(begin, kPoison, bytes);
  }
  void Clear() {
    begin_ = nullptr;
    bytes_ = 0;
    written_.clear();
  }
  bool Covers(const void* p) const {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    return q >= begin_ && q < begin_ + bytes_;
  }
  void MarkWritten(const void* p, size_t n) {
    if (!Covers(p)) return;
    const size_t at = static_cast<size_t>(static_cast<const uint8_t*>(p) - begin_);
    for (size_t k = at; k < at + n && k < bytes_; ++k) written_[k / 64] |= uint64_t{1} << (k % 64);
  }
  void CheckRead(const void* p, size_t n) const {
    if (!Covers(p)) return;
    const size_t at = static_cast<size_t>(static_cast<const uint8_t*>(p) - begin_);
    for (size_t k = at; k < at + n && k < bytes_; ++k) {
      if (!(written_[k / 64] >> (k % 64) & 1)) {
        throw std::logic_error("cuda-sim: read of launch scratch at byte " + std::to_string(k) +
                               " that this launch has not written (stale or poisoned)");
      }
    }
  }

 private:
  uint8_t* begin_ = nullptr;
  size_t bytes_ = 0;
  std::vector<uint64_t> written_;
};

// cub::BlockRadixSort's shared-memory traffic per pass of RADIX_BITS = 4 over kThreads
// threads (BlockRadixRank with 16-bit counters packed two to a word: 9 padded counter lanes
// per thread): the counters are zeroed, read by the upsweep and written by the downsweep
// (3 x 9 words per thread, plus the block scan's ~8 bytes); every key increments its digit
// counter (2 B load + 2 B store) and reads its rank (2 B); the exchange stores and loads
// every key once.
inline int64_t CubSortSharedBytes(int64_t keys, int key_bytes, int end_bit) {
  const int64_t passes = (end_bit + 3) / 4;
  const int64_t per_pass =
      keys * (6 + 2 * int64_t{key_bytes}) + pipeline::kThreads * (9 * 4 * 3 + 8);
  return passes * per_pass;
}

class SimBlock {
 public:
  SimBlock(LaunchStats* stats, const ScratchShadow* scratch)
      : stats_(stats), scratch_(const_cast<ScratchShadow*>(scratch)) {}
  explicit SimBlock(LaunchStats* stats) : SimBlock(stats, nullptr) {}

  // A thread's kN items (device: registers), uninitialized like registers.
  template <class T, int kN>
  struct Items {
    std::vector<T> v = std::vector<T>(pipeline::kThreads * kN, Garbage<T>());
  };
  template <class T, int kN>
  T* Mine(Items<T, kN>& items, int t) {
    return items.v.data() + static_cast<size_t>(t) * kN;
  }

  // One phase: f(t) for every thread, then the barrier.
  template <class F>
  void Threads(F&& f) {
    ++epoch_;
    for (int k = 0; k < pipeline::kThreads; ++k) {
      thread_ = ThreadAt(k);
      f(thread_);
    }
    thread_ = -1;
  }

  // The block's shared memory, as one object of type T (uninitialized, like the device's).
  template <class T>
  T& SharedAs() {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    // (placed on a kSharedBaseAlign boundary, as the device's shared window is, so that a
    // member's alignment is its offset's, exactly as on the GPU)
    shared_.assign(sizeof(T) + kSharedBaseAlign, kPoison);
    void* at = shared_.data();
    size_t space = shared_.size();
    T* object = static_cast<T*>(std::align(kSharedBaseAlign, sizeof(T), at, space));
    shared_begin_ = reinterpret_cast<uint8_t*>(object);
    shared_bytes_ = sizeof(T);
    // (stale entries are from earlier phases: the epoch tells them apart; a new block skips
    // an epoch so that a uniform read at the end of the last block marks no phase of this)
    if (shadow_.size() < sizeof(T)) shadow_.resize(sizeof(T));
    epoch_ += 2;
    return *object;
  }

  // Shared-memory accesses (counted; checked for races within a phase). Outside a phase a
  // load is a uniform read that every device thread makes: counted kThreads times.
  template <class T>
  T SLoad(const T* p) {
    CheckSharedAligned(p, alignof(T));
    if (thread_ < 0) {
      stats_->smem_bytes += int64_t{pipeline::kThreads} * static_cast<int64_t>(sizeof(T));
      MarkUniformRead(p, sizeof(T));
    } else {
      stats_->smem_bytes += sizeof(T);
      Touch(p, sizeof(T), kRead);
    }
    return *p;
  }
  template <class T>
  void SStore(T* p, T value) {
    CheckSharedAligned(p, alignof(T));
    if (thread_ < 0) throw std::logic_error("cuda-sim: a shared store outside a phase");
    stats_->smem_bytes += sizeof(T);
    Touch(p, sizeof(T), kWrite);
    *p = value;
  }
  template <class T>
  T SharedAdd(T* p, T value) {
    CheckSharedAligned(p, alignof(T));
    stats_->smem_bytes += 2 * sizeof(T);
    Touch(p, sizeof(T), kAtomic);
    const T old = *p;
    *p = old + value;
    return old;
  }

  // Sorts a block's kThreads * kN keys ascending, as cub::BlockRadixSort does over bits
  // [0, end_bit): every key must fit in end_bit bits, or the device would sort differently.
  // Blocked: item k of thread t is rank t * kN + k. Striped: rank k * kThreads + t.
  template <int kN>
  void SortKeys(Items<uint64_t, kN>& items, int end_bit) {
    SortChecked(items, end_bit);
  }
  // (`storage`: the device's temp storage; the host sorts in place)
  // cub's TempStorage is read with 16-byte shared loads (LDS.128): storage off a
  // kCubTempStorageAlign boundary is cudaErrorMisalignedAddress on the GPU.
  template <int kN>
  void SortKeysStriped(Items<uint64_t, kN>& items, int end_bit, pipeline::SortShared* storage) {
    CheckSharedAligned(storage, pipeline::kCubTempStorageAlign);
    SortChecked(items, end_bit);
    std::vector<uint64_t> striped(items.v.size());
    for (size_t r = 0; r < items.v.size(); ++r) {
      const size_t t = r % pipeline::kThreads;
      const size_t k = r / pipeline::kThreads;
      striped[t * kN + k] = items.v[r];
    }
    items.v = std::move(striped);
  }

  template <class T>
  T Load(const T* p) {
    CheckAligned(p, alignof(T));
    if (scratch_ != nullptr) scratch_->CheckRead(p, sizeof(T));
    stats_->bytes_read += sizeof(T);
    return *p;
  }
  template <class T>
  void Store(T* p, T value) {
    CheckAligned(p, alignof(T));
    if (scratch_ != nullptr) scratch_->MarkWritten(p, sizeof(T));
    stats_->bytes_written += sizeof(T);
    *p = value;
  }
  // Feature rows: counted apart (LaunchStats::feature_bytes).
  template <class T>
  T LoadFeature(const T* p) {
    CheckAligned(p, alignof(T));
    stats_->feature_bytes += sizeof(T);
    return *p;
  }
  template <class T>
  void StoreFeature(T* p, T value) {
    CheckAligned(p, alignof(T));
    stats_->feature_bytes += sizeof(T);
    *p = value;
  }
  // atomicAdd on global memory: a read and a write.
  template <class T>
  T GlobalAdd(T* p, T value) {
    CheckAligned(p, alignof(T));
    if (scratch_ != nullptr) scratch_->CheckRead(p, sizeof(T));
    stats_->bytes_read += sizeof(T);
    stats_->bytes_written += sizeof(T);
    const T old = *p;
    *p = old + value;
    return old;
  }
  void CountPhilox(int64_t calls) { stats_->philox_calls += calls; }
  // A bounded step overflowed: the device raises the launch's error flag (the host turns it
  // into INTERNAL); here the launch stops with that error.
  [[noreturn]] void Fail(uint32_t* /*flag*/, uint32_t code, const char* what) {
    throw Error(Error::Code::kInternal,
                std::string("cuda-sim: device error flag ") + std::to_string(code) + ": " + what);
  }

 private:
  enum Kind : uint8_t { kRead, kWrite, kAtomic };
  // Per shared byte, within the phase `epoch`: which thread wrote it plainly, read it, or
  // updated it atomically (-1 none, -2 several).
  // uniform_for: the phase right after a uniform read (outside a phase) of the byte, which
  // on the device may still be running in a slow thread while that phase begins: a store
  // there races with it.
  struct Shadow {
    uint64_t epoch = 0;
    uint64_t uniform_for = 0;
    int16_t writer = -1, reader = -1, atomic = -1;
  };
  void MarkUniformRead(const void* p, size_t n) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    if (q < shared_begin_ || q + n > shared_begin_ + shared_bytes_) {
      throw std::logic_error("cuda-sim: a shared access outside the block's shared memory");
    }
    for (size_t k = 0; k < n; ++k)
      shadow_[static_cast<size_t>(q - shared_begin_) + k].uniform_for = epoch_ + 1;
  }
  static void Note(int16_t* who, int t) {
    if (*who == -1) {
      *who = static_cast<int16_t>(t);
    } else if (*who != t) {
      *who = -2;
    }
  }
  static bool Other(int16_t who, int t) { return who != -1 && who != t; }
  static const char* KindName(Kind kind) {
    return kind == kRead ? "loads" : kind == kWrite ? "stores" : "adds atomically";
  }

  void Touch(const void* p, size_t n, Kind kind) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    if (q < shared_begin_ || q + n > shared_begin_ + shared_bytes_) {
      throw std::logic_error("cuda-sim: a shared access outside the block's shared memory");
    }
    const int t = thread_;
    for (size_t k = 0; k < n; ++k) {
      Shadow& s = shadow_[static_cast<size_t>(q - shared_begin_) + k];
      if (s.epoch != epoch_) {
        const uint64_t uniform_for = s.uniform_for;
        s = Shadow{};
        s.epoch = epoch_;
        s.uniform_for = uniform_for;
      }
      bool race = kind != kRead && s.uniform_for == epoch_;
      if (kind == kWrite) {
        race = race || Other(s.writer, t) || Other(s.reader, t) || Other(s.atomic, t);
        Note(&s.writer, t);
      } else if (kind == kRead) {
        race = Other(s.writer, t);
        Note(&s.reader, t);
      } else {
        race = race || Other(s.writer, t);
        Note(&s.atomic, t);
      }
      if (race) {
        throw std::logic_error("cuda-sim: shared-memory race at shared byte " +
                               std::to_string(q - shared_begin_ + static_cast<ptrdiff_t>(k)) +
                               " (thread " + std::to_string(t) + " " + KindName(kind) +
                               "; in this phase also writer " + std::to_string(s.writer) +
                               ", reader " + std::to_string(s.reader) + ", atomic " +
                               std::to_string(s.atomic) + "; -2: several)");
      }
    }
  }

  // A shared access (or cub's storage) off its alignment, as an offset into the block's shared
  // memory: the GPU faults (cudaErrorMisalignedAddress) and the context is lost.
  void CheckSharedAligned(const void* p, size_t align) const {
    const ptrdiff_t offset = static_cast<const uint8_t*>(p) - shared_begin_;
    if (offset >= 0 && static_cast<size_t>(offset) % align != 0) {  // (bounds: Touch)
      throw std::logic_error("cuda-sim: misaligned " + std::to_string(align) +
                             "-byte shared access at shared offset " + std::to_string(offset) +
                             " (the GPU faults)");
    }
  }

  static void CheckAligned(const void* p, size_t size) {
    if (reinterpret_cast<uintptr_t>(p) % size != 0) {  // (size: the access's alignment)
      throw std::logic_error("cuda-sim: misaligned " + std::to_string(size) +
                             "-byte global access (the GPU faults)");
    }
  }

  template <int kN>
  void SortChecked(Items<uint64_t, kN>& items, int end_bit) {
    if (thread_ >= 0) throw std::logic_error("cuda-sim: a block sort inside a phase");
    if (end_bit < 64) {
      const uint64_t limit = uint64_t{1} << end_bit;
      for (uint64_t key : items.v) {
        if (key >= limit) {
          throw std::logic_error("cuda-sim: a sort key has bits above end_bit " +
                                 std::to_string(end_bit));
        }
      }
    }
    stats_->smem_bytes += CubSortSharedBytes(static_cast<int64_t>(items.v.size()), 8, end_bit);
    std::sort(items.v.begin(), items.v.end());
  }

  template <class T>
  static T Garbage() {
    T value;
    std::memset(&value, kPoison, sizeof(T));
    return value;
  }

  LaunchStats* stats_;
  ScratchShadow* scratch_;
  std::vector<unsigned char> shared_;
  uint8_t* shared_begin_ = nullptr;
  size_t shared_bytes_ = 0;
  std::vector<Shadow> shadow_;
  uint64_t epoch_ = 0;
  int thread_ = -1;
};

// Runs kernels on the host: blocks in reverse order (the device promises no order either).
class SimExec {
 public:
  explicit SimExec(LaunchStats* stats) : stats_(stats) {}

  // The launch's scratch (pipeline::Enqueue calls this first): poisoned and marked unwritten.
  void Scratch(uint8_t* begin, size_t bytes) { scratch_.Reset(begin, bytes); }

  template <class Body>
  void Launch(const Body& body, int64_t blocks) {
    ++stats_->launches;
    if (!block_) block_ = std::make_unique<SimBlock>(stats_, &scratch_);
    for (int64_t block = blocks - 1; block >= 0; --block) body(*block_, block);
  }

 private:
  LaunchStats* stats_;
  ScratchShadow scratch_;
  std::unique_ptr<SimBlock> block_;  // one for every block: its shadow's epochs never repeat
};

}  // namespace gpusampler::kernels::sim
