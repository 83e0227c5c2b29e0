// cuda-sim's checks of what a GPU would get wrong or reject (sim/sim_block.hpp): a planted
// shared-memory race, a planted read of stale launch scratch and a planted misaligned global
// load each fail; the same bodies without the plant pass. And shared-memory bytes are
// counted access by access.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpusampler/kernels/types.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_block.hpp"

namespace gpusampler::kernels::sim {
namespace {

using pipeline::kThreads;

// Every thread stores its id into shared word `slot(t)`, then thread 0 stores the words'
// sum to *out.
struct SharedWordsBody {
  int (*slot)(int) = nullptr;
  bool read_neighbour = false;  // also load the next thread's word in the storing phase
  int32_t* out = nullptr;
  struct Shared {
    int32_t word[kThreads];
  };
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      b.SStore(&sh.word[slot(t)], t);
      if (read_neighbour) (void)b.SLoad(&sh.word[(slot(t) + 1) % kThreads]);
    });
    b.Threads([&](int t) {
      if (t != 0) return;
      int32_t sum = 0;
      for (int k = 0; k < kThreads; ++k) sum += b.SLoad(&sh.word[k]);
      b.Store(out, sum);
    });
  }
};

int OwnSlot(int t) { return t; }
int SameSlot(int /*t*/) { return 7; }

TEST(SimChecksTest, SharedStoresToOwnWordsPassAndAreCounted) {
  LaunchStats stats;
  int32_t out = 0;
  SimExec(&stats).Launch(SharedWordsBody{OwnSlot, false, &out}, 1);
  EXPECT_EQ(out, kThreads * (kThreads - 1) / 2);
  // 256 stores and 256 loads of 4 bytes.
  EXPECT_EQ(stats.smem_bytes, 2 * kThreads * 4);
  EXPECT_EQ(stats.bytes_written, 4);
}

TEST(SimChecksTest, PlantedRaceTwoThreadsStoreOneWord) {
  LaunchStats stats;
  int32_t out = 0;
  EXPECT_THROW(SimExec(&stats).Launch(SharedWordsBody{SameSlot, false, &out}, 1), std::logic_error);
}

TEST(SimChecksTest, PlantedRaceLoadOfAWordAnotherThreadStores) {
  LaunchStats stats;
  int32_t out = 0;
  EXPECT_THROW(SimExec(&stats).Launch(SharedWordsBody{OwnSlot, true, &out}, 1), std::logic_error);
}

// Atomics from every thread to one word are no race.
struct SharedCounterBody {
  int32_t* out = nullptr;
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    int32_t& counter = b.template SharedAs<int32_t>();
    b.Threads([&](int t) {
      if (t == 0) b.SStore(&counter, 0);
    });
    b.Threads([&](int /*t*/) { b.SharedAdd(&counter, 1); });
    b.Threads([&](int t) {
      if (t == 0) b.Store(out, b.SLoad(&counter));
    });
  }
};

TEST(SimChecksTest, AtomicsOnOneWordAreNoRace) {
  LaunchStats stats;
  int32_t out = 0;
  SimExec(&stats).Launch(SharedCounterBody{&out}, 1);
  EXPECT_EQ(out, kThreads);
}

// Every thread reads a shared word outside a phase (a uniform read), then thread 0 stores
// it in the very next phase (`barrier_between`: one phase later).
struct UniformThenStoreBody {
  bool barrier_between = false;
  int32_t* out = nullptr;
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    int32_t& word = b.template SharedAs<int32_t>();
    b.Threads([&](int t) {
      if (t == 0) b.SStore(&word, 5);
    });
    const int32_t seen = b.SLoad(&word);
    if (barrier_between) b.Threads([&](int /*t*/) {});
    b.Threads([&](int t) {
      if (t == 0) b.SStore(&word, seen + 1);
    });
    b.Threads([&](int t) {
      if (t == 0) b.Store(out, b.SLoad(&word));
    });
  }
};

TEST(SimChecksTest, PlantedRaceStoreRightAfterAUniformRead) {
  LaunchStats stats;
  int32_t out = 0;
  EXPECT_THROW(SimExec(&stats).Launch(UniformThenStoreBody{false, &out}, 1), std::logic_error);
  SimExec(&stats).Launch(UniformThenStoreBody{true, &out}, 2);
  EXPECT_EQ(out, 6);
}

// Writes scratch word 0 (when `write`) and copies it to *out.
struct ScratchBody {
  uint64_t* scratch = nullptr;
  bool write = true;
  uint64_t* out = nullptr;
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    b.Threads([&](int t) {
      if (t == 0 && write) b.Store(scratch, uint64_t{42});
    });
    b.Threads([&](int t) {
      if (t == 0) b.Store(out, b.Load(scratch));
    });
  }
};

TEST(SimChecksTest, PlantedReadOfStaleScratchFails) {
  std::vector<uint64_t> arena(64, 0);
  uint8_t* begin = reinterpret_cast<uint8_t*>(arena.data());
  uint64_t out = 0;
  LaunchStats stats;
  SimExec first(&stats);
  first.Scratch(begin, arena.size() * 8);
  first.Launch(ScratchBody{arena.data(), true, &out}, 1);
  EXPECT_EQ(out, 42u);
  // The next launch reads the word without writing it: the value is the last launch's.
  SimExec second(&stats);
  second.Scratch(begin, arena.size() * 8);
  EXPECT_THROW(second.Launch(ScratchBody{arena.data(), false, &out}, 1), std::logic_error);
  // ... and the scratch was poisoned in between.
  EXPECT_EQ(arena[0], 0xA5A5A5A5A5A5A5A5ull);
}

// Loads an int64 at byte `offset` of `bytes`.
struct LoadAtBody {
  const uint8_t* bytes = nullptr;
  int offset = 0;
  int64_t* out = nullptr;
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    b.Threads([&](int t) {
      if (t == 0) b.Store(out, b.Load(reinterpret_cast<const int64_t*>(bytes + offset)));
    });
  }
};

TEST(SimChecksTest, PlantedMisalignedLoadFails) {
  std::vector<int64_t> words(4, 5);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(words.data());
  int64_t out = 0;
  LaunchStats stats;
  SimExec(&stats).Launch(LoadAtBody{bytes, 8, &out}, 1);
  EXPECT_EQ(out, 5);
  EXPECT_THROW(SimExec(&stats).Launch(LoadAtBody{bytes, 4, &out}, 1), std::logic_error);
}

// A block sort is counted at cub's shared traffic.
TEST(SimChecksTest, BlockSortIsCounted) {
  EXPECT_EQ(CubSortSharedBytes(4096, 8, 64), 16 * (4096 * 22 + kThreads * 116));
}

// The layout the GPU round 4 review found: an 8-byte-aligned copy of the small sort's shared
// arrays at 8 mod 16 in a body's Shared, handed to the block sort as its storage (cub reads
// its TempStorage with 16-byte loads). `planted` false: the real SortShared, which is aligned.
struct SortStorageBody {
  bool planted = false;
  struct EightAligned {  // SortShared before alignas: alignment 8
    uint64_t keys[pipeline::kBlockKeys];
    int32_t count[pipeline::kSortBinsMax];
  };
  struct Shared {
    int64_t n;  // offset 0: the storage below starts at offset 8 (planted) or 16 (real)
    EightAligned old_layout;
    pipeline::SortShared sort;
  };
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    Shared& sh = b.template SharedAs<Shared>();
    pipeline::KeyItems<B> keys;
    b.Threads([&](int t) {
      uint64_t* mine = b.Mine(keys, t);
      for (int k = 0; k < pipeline::kItems; ++k) mine[k] = uint64_t(k) * kThreads + t;
    });
    pipeline::SortShared* storage =
        planted ? reinterpret_cast<pipeline::SortShared*>(&sh.old_layout) : &sh.sort;
    b.SortKeysStriped(keys, 64, storage);
  }
};

TEST(SimChecksTest, PlantedSortStorageAtEightModSixteenFails) {
  static_assert(offsetof(SortStorageBody::Shared, old_layout) % 16 == 8);
  LaunchStats stats;
  try {
    SimExec(&stats).Launch(SortStorageBody{true}, 1);
    FAIL() << "a block sort on 8-mod-16 storage passed";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("misaligned 16-byte shared access at shared offset 8"),
              std::string::npos)
        << e.what();
  }
}

TEST(SimChecksTest, SortStorageOfTheRealSortSharedPasses) {
  LaunchStats stats;
  EXPECT_NO_THROW(SimExec(&stats).Launch(SortStorageBody{false}, 1));
}

// A shared load of an 8-byte word at offset 4: the GPU faults; so does cuda-sim.
struct MisalignedSharedWordBody {
  struct Shared {
    uint32_t words[4];
  };
  template <class B>
  void operator()(B& b, int64_t /*block*/) const {
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      if (t == 0) (void)b.SLoad(reinterpret_cast<const uint64_t*>(&sh.words[1]));
    });
  }
};

TEST(SimChecksTest, PlantedMisalignedSharedLoadFails) {
  LaunchStats stats;
  EXPECT_THROW(SimExec(&stats).Launch(MisalignedSharedWordBody{}, 1), std::logic_error);
}

}  // namespace
}  // namespace gpusampler::kernels::sim
