#include "observability/nvml.hpp"

#include <dlfcn.h>

namespace gpusampler::server {
namespace {
// The few NVML types and entry points used, declared from the NVML API reference (stable
// ABI since NVML 5); including nvml.h would add a build dependency on the driver headers.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*cuda_driver_version)(int*) = nullptr;  // optional
};

std::unique_ptr<Nvml> Nvml::Load(std::string* why, const std::string& library) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = "dlopen(" + library + ") failed: " + (e ? e : "unknown error");
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  auto sym = [&](const char* name, auto** fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(h, name));
    return *fn != nullptr;
  };
  if (!sym("nvmlInit_v2", &api->init) || !sym("nvmlShutdown", &api->shutdown) ||
      !sym("nvmlDeviceGetHandleByUUID", &api->by_uuid) ||
      !sym("nvmlDeviceGetUtilizationRates", &api->utilization) ||
      !sym("nvmlDeviceGetMemoryInfo", &api->memory)) {
    *why = library + " lacks an expected symbol";
    dlclose(h);
    return nullptr;
  }
  sym("nvmlSystemGetCudaDriverVersion_v2", &api->cuda_driver_version);
  if (const nvmlReturn_t rc = api->init(); rc != kNvmlSuccess) {
    *why = "nvmlInit_v2 returned " + std::to_string(rc);
    dlclose(h);
    return nullptr;
  }
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->handle_ = h;
  nvml->api_ = std::move(api);
  return nvml;
}

Nvml::~Nvml() {
  if (api_) api_->shutdown();
  if (handle_) dlclose(handle_);
}

bool Nvml::Read(const std::string& uuid, Reading* out) const {
  nvmlDevice_t dev = nullptr;
  if (api_->by_uuid(uuid.c_str(), &dev) != kNvmlSuccess) return false;
  nvmlUtilization_t util{};
  nvmlMemory_t mem{};
  out->has_utilization = api_->utilization(dev, &util) == kNvmlSuccess;
  if (out->has_utilization) out->utilization = util.gpu / 100.0;
  out->has_memory = api_->memory(dev, &mem) == kNvmlSuccess;
  if (out->has_memory) {
    out->memory_used = mem.used;
    out->memory_total = mem.total;
  }
  return true;
}

std::string Nvml::CudaDriverVersion() const {
  int v = 0;
  if (!api_->cuda_driver_version || api_->cuda_driver_version(&v) != kNvmlSuccess || v <= 0) {
    return "unknown";
  }
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);  // 12080 -> 12.8
}

}  // namespace gpusampler::server
