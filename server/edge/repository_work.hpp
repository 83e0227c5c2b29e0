// A few threads for the process on which the services run repository work that may block
// for seconds (a dataset load on a miss, a deletion on a slow mount, a listing of 100k
// files): gRPC's callback threads never wait on the repository (issue 31). Started on first
// use; a reactor whose work runs here finishes from the thread that did it.
// Thread-safety: thread-safe.
#pragma once

#include <functional>

namespace gpusampler::server {

void RunRepositoryWork(std::function<void()> work);

}  // namespace gpusampler::server
