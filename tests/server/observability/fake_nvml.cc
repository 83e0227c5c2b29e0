// A stand-in for libnvidia-ml.so.1 with the entry points the server loads (observability/
// nvml.cc), for tests on hosts without a GPU. One device, "GPU-fake-0"; FAKE_NVML_MIG=1 makes
// it answer like a MIG slice: memory yes, utilization NVML_ERROR_NOT_SUPPORTED (3).
#include <cstdlib>
#include <cstring>

extern "C" {

typedef struct {
  unsigned int gpu;
  unsigned int memory;
} FakeUtilization;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} FakeMemory;

int fake_device;

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (strcmp(uuid, "GPU-fake-0") != 0) return 13;  // NVML_ERROR_NOT_FOUND
  *device = &fake_device;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* device, FakeUtilization* out) {
  static_cast<void>(device);
  const char* mig = getenv("FAKE_NVML_MIG");
  if (mig != nullptr && strcmp(mig, "1") == 0) return 3;  // NVML_ERROR_NOT_SUPPORTED
  out->gpu = 42;
  out->memory = 7;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, FakeMemory* out) {
  static_cast<void>(device);
  out->total = 80ull << 30;
  out->used = 3ull << 30;
  out->free = out->total - out->used;
  return 0;
}
int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  *version = 13000;
  return 0;
}
}  // extern "C"
