// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no nvml.h, no link-time
// dependency. Thread-safe after Load (NVML itself is thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace gpusampler::server {

class Nvml {
 public:
  // Loads and initialises NVML from `library` (the driver's libnvidia-ml.so.1 unless a test
  // names a stand-in); returns null with `why` set when it is absent or fails.
  static std::unique_ptr<Nvml> Load(std::string* why,
                                    const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Each part is read on its own: on a MIG slice NVML answers memory but not utilization
  // (NVML_ERROR_NOT_SUPPORTED), and one missing part must not hide the other.
  struct Reading {
    bool has_utilization = false;
    double utilization = 0;  // GPU busy fraction over NVML's last sample period, [0, 1]
    bool has_memory = false;
    uint64_t memory_used = 0;
    uint64_t memory_total = 0;
  };
  // Reads the device with this UUID ("GPU-..."); false when NVML does not know it (then
  // neither part is set).
  bool Read(const std::string& uuid, Reading* out) const;
  // The CUDA version the driver supports ("12.8"), or "unknown".
  std::string CudaDriverVersion() const;

 private:
  Nvml() = default;
  struct Api;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

}  // namespace gpusampler::server
