// Background threads yield the CPU to requests: a dataset load, a listing or a directory scan
// runs at a lower scheduling priority than the threads that answer samples and probes.
#pragma once

namespace gpusampler::server {

// The nice value background threads run at, relative to the process's (Linux: per thread).
inline constexpr int kBackgroundNice = 10;

// Lowers the calling thread's scheduling priority by `increment` nice steps (Linux threads
// have their own nice value; threads it starts inherit it). Lowering needs no privilege; a
// failure leaves the priority as it was and is logged once.
void LowerThisThreadsPriority(int increment = kBackgroundNice);

}  // namespace gpusampler::server
