// The CUDA page backend and host registration, through the CUDA driver API. libcuda is opened
// at run time (dlopen "libcuda.so.1"): a build with the toolkit runs unchanged on machines
// without a GPU or driver, where every call answers Unavailable.
#include <cuda.h>
#include <dlfcn.h>

#include <map>
#include <mutex>

#include "mem/cuda_driver.h"
#include "objectcache/kv_pool.h"

namespace objectcache {
namespace cuda {
namespace {

#define OC_CUDA_NAME2(x) #x
#define OC_CUDA_NAME(x) OC_CUDA_NAME2(x)  // expands cuda.h's versioning macros first

// The driver entry points, resolved once.
struct Driver {
#define OC_CUDA_FN(fn) decltype(&fn) fn##_ = nullptr;
  OC_CUDA_FN(cuInit)
  OC_CUDA_FN(cuDeviceGet)
  OC_CUDA_FN(cuDeviceGetCount)
  OC_CUDA_FN(cuDevicePrimaryCtxRetain)
  OC_CUDA_FN(cuCtxSetCurrent)
  OC_CUDA_FN(cuGetErrorString)
  OC_CUDA_FN(cuMemGetAllocationGranularity)
  OC_CUDA_FN(cuMemAddressReserve)
  OC_CUDA_FN(cuMemAddressFree)
  OC_CUDA_FN(cuMemCreate)
  OC_CUDA_FN(cuMemRelease)
  OC_CUDA_FN(cuMemMap)
  OC_CUDA_FN(cuMemUnmap)
  OC_CUDA_FN(cuMemSetAccess)
  OC_CUDA_FN(cuMemcpy)
  OC_CUDA_FN(cuMemHostRegister)
  OC_CUDA_FN(cuMemHostUnregister)
#undef OC_CUDA_FN
  Status loaded;
  CUcontext context = nullptr;
  int device = -1;
};

Driver& TheDriver() {
  static Driver* d = [] {
    auto* drv = new Driver;
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      drv->loaded = UnavailableError("no CUDA driver (libcuda.so.1): " + std::string(::dlerror()));
      return drv;
    }
#define OC_CUDA_LOAD(fn)                                                                      \
  drv->fn##_ = reinterpret_cast<decltype(&fn)>(::dlsym(lib, OC_CUDA_NAME(fn)));               \
  if (!drv->fn##_) {                                                                          \
    drv->loaded = UnavailableError(std::string("the CUDA driver lacks ") + OC_CUDA_NAME(fn)); \
    return drv;                                                                               \
  }
    OC_CUDA_LOAD(cuInit)
    OC_CUDA_LOAD(cuDeviceGet)
    OC_CUDA_LOAD(cuDeviceGetCount)
    OC_CUDA_LOAD(cuDevicePrimaryCtxRetain)
    OC_CUDA_LOAD(cuCtxSetCurrent)
    OC_CUDA_LOAD(cuGetErrorString)
    OC_CUDA_LOAD(cuMemGetAllocationGranularity)
    OC_CUDA_LOAD(cuMemAddressReserve)
    OC_CUDA_LOAD(cuMemAddressFree)
    OC_CUDA_LOAD(cuMemCreate)
    OC_CUDA_LOAD(cuMemRelease)
    OC_CUDA_LOAD(cuMemMap)
    OC_CUDA_LOAD(cuMemUnmap)
    OC_CUDA_LOAD(cuMemSetAccess)
    OC_CUDA_LOAD(cuMemcpy)
    OC_CUDA_LOAD(cuMemHostRegister)
    OC_CUDA_LOAD(cuMemHostUnregister)
#undef OC_CUDA_LOAD
    if (drv->cuInit_(0) != CUDA_SUCCESS) drv->loaded = UnavailableError("cuInit failed");
    return drv;
  }();
  return *d;
}

Status Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status();
  const char* msg = nullptr;
  if (TheDriver().cuGetErrorString_) TheDriver().cuGetErrorString_(r, &msg);
  const std::string m = std::string(what) + ": " + (msg ? msg : "CUDA error") + " (" +
                        std::to_string(static_cast<int>(r)) + ")";
  return r == CUDA_ERROR_OUT_OF_MEMORY ? ResourceExhaustedError(m) : InternalError(m);
}

std::mutex init_mu;

// Makes the device's primary context current on the calling thread.
Status Current(int device) {
  Driver& d = TheDriver();
  OC_RETURN_IF_ERROR(d.loaded);
  std::lock_guard lock(init_mu);
  if (d.device != device) {
    int count = 0;
    OC_RETURN_IF_ERROR(Check(d.cuDeviceGetCount_(&count), "cuDeviceGetCount"));
    if (device < 0 || device >= count) {
      return UnavailableError("no CUDA device " + std::to_string(device) + " (" +
                              std::to_string(count) + " present)");
    }
    CUdevice dev;
    OC_RETURN_IF_ERROR(Check(d.cuDeviceGet_(&dev, device), "cuDeviceGet"));
    OC_RETURN_IF_ERROR(
        Check(d.cuDevicePrimaryCtxRetain_(&d.context, dev), "cuDevicePrimaryCtxRetain"));
    d.device = device;
  }
  return Check(d.cuCtxSetCurrent_(d.context), "cuCtxSetCurrent");
}

CUdeviceptr Ptr(const std::byte* p) { return reinterpret_cast<CUdeviceptr>(p); }

class CudaPageBackend final : public PageBackend {
 public:
  CudaPageBackend(int device, uint64_t page_bytes, CUmemAllocationProp prop)
      : device_(device), page_bytes_(page_bytes), prop_(prop) {}

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  uint64_t page_bytes() const override { return page_bytes_; }
  bool host_accessible() const override { return false; }

  Result<std::byte*> Reserve(uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Current(device_));
    CUdeviceptr p = 0;
    OC_RETURN_IF_ERROR(Check(TheDriver().cuMemAddressReserve_(&p, bytes, page_bytes_, 0, 0),
                             "cuMemAddressReserve"));
    return reinterpret_cast<std::byte*>(p);
  }

  Status Map(std::byte* base, uint64_t index) override {
    OC_RETURN_IF_ERROR(Current(device_));
    Driver& d = TheDriver();
    CUmemGenericAllocationHandle handle;
    OC_RETURN_IF_ERROR(Check(d.cuMemCreate_(&handle, page_bytes_, &prop_, 0), "cuMemCreate"));
    const CUdeviceptr at = Ptr(base) + index * page_bytes_;
    Status s = Check(d.cuMemMap_(at, page_bytes_, 0, handle, 0), "cuMemMap");
    if (s.ok()) {
      CUmemAccessDesc access{};
      access.location = prop_.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      s = Check(d.cuMemSetAccess_(at, page_bytes_, &access, 1), "cuMemSetAccess");
      if (!s.ok()) d.cuMemUnmap_(at, page_bytes_);
    }
    if (!s.ok()) {
      d.cuMemRelease_(handle);
      return s;
    }
    handles_[index] = handle;
    return Status();
  }

  Status Unmap(std::byte* base, uint64_t index) override {
    OC_RETURN_IF_ERROR(Current(device_));
    Driver& d = TheDriver();
    auto it = handles_.find(index);
    if (it == handles_.end()) return InternalError("unmapping a page that is not mapped");
    OC_RETURN_IF_ERROR(
        Check(d.cuMemUnmap_(Ptr(base) + index * page_bytes_, page_bytes_), "cuMemUnmap"));
    const Status s = Check(d.cuMemRelease_(it->second), "cuMemRelease");
    handles_.erase(it);
    return s;
  }

  void Release(std::byte* base, uint64_t bytes) override {
    if (!Current(device_).ok()) return;
    for (const auto& [index, handle] : handles_) {
      TheDriver().cuMemUnmap_(Ptr(base) + index * page_bytes_, page_bytes_);
      TheDriver().cuMemRelease_(handle);
    }
    handles_.clear();
    TheDriver().cuMemAddressFree_(Ptr(base), bytes);
  }

  Status Copy(std::byte* dst, const std::byte* src, uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Current(device_));
    return Check(TheDriver().cuMemcpy_(Ptr(dst), Ptr(src), bytes), "cuMemcpy");
  }

 private:
  const int device_;
  const uint64_t page_bytes_;
  const CUmemAllocationProp prop_;
  std::map<uint64_t, CUmemGenericAllocationHandle> handles_;  // by page index
};

}  // namespace

bool Built() { return true; }

Status Init(int device) { return Current(device); }

Status RegisterHostMemory(void* p, size_t bytes) {
  OC_RETURN_IF_ERROR(Current(0));
  return Check(TheDriver().cuMemHostRegister_(p, bytes, 0), "cuMemHostRegister");
}

Status UnregisterHostMemory(void* p) {
  OC_RETURN_IF_ERROR(Current(0));
  return Check(TheDriver().cuMemHostUnregister_(p), "cuMemHostUnregister");
}

}  // namespace cuda

bool CudaAvailable() { return cuda::Init(0).ok(); }

Result<std::unique_ptr<PageBackend>> NewCudaPageBackend(int device, uint64_t page_bytes) {
  OC_RETURN_IF_ERROR(cuda::Init(device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  OC_RETURN_IF_ERROR(cuda::Check(cuda::TheDriver().cuMemGetAllocationGranularity_(
                                     &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                                 "cuMemGetAllocationGranularity"));
  if (page_bytes == 0) page_bytes = std::max<uint64_t>(granularity, kDefaultPageBytes);
  if (page_bytes % granularity != 0) {
    return InvalidArgumentError("the page size must be a multiple of the device's granularity (" +
                                std::to_string(granularity) + " bytes)");
  }
  return std::unique_ptr<PageBackend>(new cuda::CudaPageBackend(device, page_bytes, prop));
}

}  // namespace objectcache
