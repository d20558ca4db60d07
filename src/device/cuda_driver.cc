#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

namespace objectcache::cuda {
namespace {

// cuGetProcAddress_v2 (CUDA 12.0 and later drivers) and cuGetProcAddress (11.3 and later).
using GetProcAddressV2 = CUresult(const char*, void**, int, unsigned long long, int*);
using GetProcAddressV1 = CUresult(const char*, void**, int, unsigned long long);

struct Loaded {
  DriverApi api;
  Status status;
};

Loaded Load() {
  Loaded out;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.status = UnavailableError("no CUDA driver (libcuda.so.1): " + std::string(::dlerror()));
    return out;
  }
  auto* v2 = reinterpret_cast<GetProcAddressV2*>(::dlsym(lib, "cuGetProcAddress_v2"));
  auto* v1 = reinterpret_cast<GetProcAddressV1*>(::dlsym(lib, "cuGetProcAddress"));
  // By cuGetProcAddress where the driver has it (it picks the entry point of the signature
  // version asked for), else by the exported symbol of that version.
  auto resolve = [&](const char* name, const char* symbol) -> void* {
    void* fn = nullptr;
    int found = 0;
    if (v2 && v2(name, &fn, kCudaApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&
        fn) {
      return fn;
    }
    if (!v2 && v1 && v1(name, &fn, kCudaApiVersion, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS &&
        fn) {
      return fn;
    }
    return ::dlsym(lib, symbol);
  };
#define OC_CUDA_RESOLVE(name, symbol, type)                                          \
  out.api.name = reinterpret_cast<std::add_pointer_t<type>>(resolve(#name, symbol)); \
  if (!out.api.name) {                                                               \
    out.status = UnavailableError("the CUDA driver lacks " #name " (" symbol ")");   \
    return out;                                                                      \
  }
  OC_CUDA_ENTRY_POINTS(OC_CUDA_RESOLVE)
#undef OC_CUDA_RESOLVE
  if (const CUresult r = out.api.cuInit(0); r != CUDA_SUCCESS) {
    out.status = UnavailableError("cuInit failed (" + std::to_string(r) + "): no usable GPU");
  }
  return out;
}

const Loaded& TheDriver() {
  static const Loaded* loaded = new Loaded(Load());  // never freed: used until exit
  return *loaded;
}

std::mutex contexts_mu;
std::vector<CUcontext> contexts;  // guarded by contexts_mu: primary context by ordinal

}  // namespace

Result<const DriverApi*> Driver() {
  const Loaded& d = TheDriver();
  if (!d.status.ok()) return d.status;
  return &d.api;
}

Status Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status();
  const char* msg = nullptr;
  if (const Loaded& d = TheDriver(); d.api.cuGetErrorString) d.api.cuGetErrorString(r, &msg);
  const std::string m =
      std::string(what) + ": " + (msg ? msg : "CUDA error") + " (" + std::to_string(r) + ")";
  return r == CUDA_ERROR_OUT_OF_MEMORY ? ResourceExhaustedError(m) : InternalError(m);
}

Status MakeCurrent(int ordinal) {
  OC_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  CUcontext context = nullptr;
  {
    std::lock_guard lock(contexts_mu);
    if (ordinal < 0 || static_cast<size_t>(ordinal) >= contexts.size() || !contexts[ordinal]) {
      int count = 0;
      OC_RETURN_IF_ERROR(Check(api->cuDeviceGetCount(&count), "cuDeviceGetCount"));
      if (ordinal < 0 || ordinal >= count) {
        return UnavailableError("no CUDA device " + std::to_string(ordinal) + " (" +
                                std::to_string(count) + " present)");
      }
      CUdevice dev = 0;
      OC_RETURN_IF_ERROR(Check(api->cuDeviceGet(&dev, ordinal), "cuDeviceGet"));
      CUcontext c = nullptr;
      OC_RETURN_IF_ERROR(Check(api->cuDevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain"));
      if (contexts.size() <= static_cast<size_t>(ordinal)) contexts.resize(ordinal + 1);
      contexts[ordinal] = c;
    }
    context = contexts[ordinal];
  }
  return Check(api->cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

std::string DeviceName(int ordinal) {
  Result<const DriverApi*> api = Driver();
  CUdevice dev = 0;
  char name[256] = {};
  if (!api || (*api)->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
      (*api)->cuDeviceGetName(name, sizeof(name) - 1, dev) != CUDA_SUCCESS) {
    return "";
  }
  return name;
}

Status RegisterHostMemory(void* p, size_t bytes) {
  OC_RETURN_IF_ERROR(MakeCurrent(0));
  return Check((*Driver())->cuMemHostRegister(p, bytes, 0), "cuMemHostRegister");
}

Status UnregisterHostMemory(void* p) {
  OC_RETURN_IF_ERROR(MakeCurrent(0));
  return Check((*Driver())->cuMemHostUnregister(p), "cuMemHostUnregister");
}

}  // namespace objectcache::cuda
