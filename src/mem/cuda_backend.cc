// The elastic pool's CUDA page backend: device pages mapped into a reserved virtual range with
// the driver's virtual memory management (cuMemCreate / cuMemMap), through the driver opened at
// run time (src/device/cuda_driver.h). Every build has it; without a driver it answers
// Unavailable.
#include <map>

#include "device/cuda_driver.h"
#include "objectcache/kv_pool.h"

namespace objectcache {
namespace {

using cuda::Check;
using cuda::CUdeviceptr;
using cuda::CUmemGenericAllocationHandle;

CUdeviceptr Ptr(const std::byte* p) { return reinterpret_cast<CUdeviceptr>(p); }

class CudaPageBackend final : public PageBackend {
 public:
  CudaPageBackend(const cuda::DriverApi* api, int device, uint64_t page_bytes,
                  cuda::CUmemAllocationProp prop)
      : api_(api), device_(device), page_bytes_(page_bytes), prop_(prop) {}

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  uint64_t page_bytes() const override { return page_bytes_; }
  bool host_accessible() const override { return false; }

  Result<std::byte*> Reserve(uint64_t bytes) override {
    OC_RETURN_IF_ERROR(cuda::MakeCurrent(device_));
    CUdeviceptr p = 0;
    OC_RETURN_IF_ERROR(
        Check(api_->cuMemAddressReserve(&p, bytes, page_bytes_, 0, 0), "cuMemAddressReserve"));
    return reinterpret_cast<std::byte*>(p);
  }

  Status Map(std::byte* base, uint64_t index) override {
    OC_RETURN_IF_ERROR(cuda::MakeCurrent(device_));
    CUmemGenericAllocationHandle handle = 0;
    OC_RETURN_IF_ERROR(Check(api_->cuMemCreate(&handle, page_bytes_, &prop_, 0), "cuMemCreate"));
    const CUdeviceptr at = Ptr(base) + index * page_bytes_;
    Status s = Check(api_->cuMemMap(at, page_bytes_, 0, handle, 0), "cuMemMap");
    if (s.ok()) {
      cuda::CUmemAccessDesc access{};
      access.location = prop_.location;
      access.flags = cuda::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      s = Check(api_->cuMemSetAccess(at, page_bytes_, &access, 1), "cuMemSetAccess");
      if (!s.ok()) api_->cuMemUnmap(at, page_bytes_);
    }
    if (!s.ok()) {
      api_->cuMemRelease(handle);
      return s;
    }
    handles_[index] = handle;
    return Status();
  }

  Status Unmap(std::byte* base, uint64_t index) override {
    OC_RETURN_IF_ERROR(cuda::MakeCurrent(device_));
    auto it = handles_.find(index);
    if (it == handles_.end()) return InternalError("unmapping a page that is not mapped");
    OC_RETURN_IF_ERROR(
        Check(api_->cuMemUnmap(Ptr(base) + index * page_bytes_, page_bytes_), "cuMemUnmap"));
    const Status s = Check(api_->cuMemRelease(it->second), "cuMemRelease");
    handles_.erase(it);
    return s;
  }

  void Release(std::byte* base, uint64_t bytes) override {
    if (!cuda::MakeCurrent(device_).ok()) return;
    for (const auto& [index, handle] : handles_) {
      api_->cuMemUnmap(Ptr(base) + index * page_bytes_, page_bytes_);
      api_->cuMemRelease(handle);
    }
    handles_.clear();
    api_->cuMemAddressFree(Ptr(base), bytes);
  }

  Status Copy(std::byte* dst, const std::byte* src, uint64_t bytes) override {
    OC_RETURN_IF_ERROR(cuda::MakeCurrent(device_));
    return Check(api_->cuMemcpy(Ptr(dst), Ptr(src), bytes), "cuMemcpy");
  }

 private:
  const cuda::DriverApi* const api_;
  const int device_;
  const uint64_t page_bytes_;
  const cuda::CUmemAllocationProp prop_;
  std::map<uint64_t, CUmemGenericAllocationHandle> handles_;  // by page index
};

}  // namespace

bool CudaAvailable() { return cuda::MakeCurrent(0).ok(); }

Result<std::unique_ptr<PageBackend>> NewCudaPageBackend(int device, uint64_t page_bytes) {
  OC_RETURN_IF_ERROR(cuda::MakeCurrent(device));
  const cuda::DriverApi* api = *cuda::Driver();
  cuda::CUmemAllocationProp prop{};
  prop.type = cuda::CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = cuda::CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  OC_RETURN_IF_ERROR(Check(api->cuMemGetAllocationGranularity(
                               &granularity, &prop, cuda::CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                           "cuMemGetAllocationGranularity"));
  if (page_bytes == 0) page_bytes = std::max<uint64_t>(granularity, kDefaultPageBytes);
  if (page_bytes % granularity != 0) {
    return InvalidArgumentError("the page size must be a multiple of the device's granularity (" +
                                std::to_string(granularity) + " bytes)");
  }
  return std::unique_ptr<PageBackend>(new CudaPageBackend(api, device, page_bytes, prop));
}

}  // namespace objectcache
