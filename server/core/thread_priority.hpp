// Background threads yield the CPU to requests: a dataset load, a listing or a directory scan
// runs at a lower scheduling priority than the threads that answer samples and probes.
#pragma once

namespace gpusampler::server {

// The nice value background threads run at, relative to the process's (Linux: per thread):
// the lowest, 19 (CFS weight 15 against 1,024 at nice 0). Under the full load storm the
// golden request's p99 was under 50 ms in 4 of 5 runs at +19 against 2 of 5 at +10
// (docs/decisions.md S22); SCHED_IDLE could starve a load for good on a busy node.
inline constexpr int kBackgroundNice = 19;

// Lowers the calling thread's scheduling priority by `increment` nice steps (Linux threads
// have their own nice value; threads it starts inherit it). Lowering needs no privilege; a
// failure leaves the priority as it was and is logged once.
void LowerThisThreadsPriority(int increment = kBackgroundNice);

}  // namespace gpusampler::server
