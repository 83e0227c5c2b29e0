// spdlog set-up: level and a text or JSON (one object per line, for containers) format.
#pragma once

#include <string>

namespace gpusampler::server {

// Installs the default logger (stderr). `format` is "text" or "json". Not thread-safe: call
// before starting threads.
void InitLogging(const std::string& level, const std::string& format);

}  // namespace gpusampler::server
