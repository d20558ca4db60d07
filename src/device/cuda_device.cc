// The CUDA device (include/objectcache/device.h) through the driver API opened at run time
// (cuda_driver.h). Scatter and Gather are two driver calls each: one copy of the whole staged
// buffer between pinned host memory and the stream's device scratch, and one launch of the copy
// kernel (copy_kernel.ptx, compiled by the driver the first time it is needed) that moves the
// segments between the scratch and the paged blocks at device-memory speed.
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "device/call_counter.h"
#include "device/copy_kernel_ptx.h"
#include "device/cuda_driver.h"
#include "objectcache/device.h"

namespace objectcache::device {
namespace {

using cuda::Check;
using cuda::CUdeviceptr;

class CudaStream final : public Stream {
 public:
  CudaStream(cuda::CUstream s, bool own) : stream(s), owned(own) {}
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(stream); }
  cuda::CUstream stream;
  bool owned;
  // Device memory the stream's scatters and gathers stage through (grown as needed).
  CUdeviceptr scratch = 0;
  uint64_t scratch_bytes = 0;
  std::function<void()> release;
  ~CudaStream() override {
    if (release) release();
  }
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cuda::CUevent e) : event(e) {}
  cuda::CUevent event;
  std::function<void()> release;
  ~CudaEvent() override {
    if (release) release();
  }
};

class CudaTable final : public SegmentTable {
 public:
  CudaTable(CUdeviceptr p, size_t n) : segments(p), count(n) {}
  size_t size() const override { return count; }
  CUdeviceptr segments;
  size_t count;
  std::function<void()> release;
  ~CudaTable() override {
    if (release) release();
  }
};

static_assert(sizeof(CopySegment) == 24, "the copy kernel reads 24-byte segments");

class CudaDevice final : public Device {
 public:
  CudaDevice(const cuda::DriverApi* api, int ordinal)
      : api_(api), ordinal_(ordinal), name_(cuda::DeviceName(ordinal)) {}

  std::string name() const override {
    return "cuda:" + std::to_string(ordinal_) + (name_.empty() ? "" : " (" + name_ + ")");
  }
  bool emulated() const override { return false; }

  Result<DevicePtr> Allocate(uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Current());
    CUdeviceptr p = 0;
    OC_RETURN_IF_ERROR(Check(api_->cuMemAlloc(&p, bytes), "cuMemAlloc"));
    return DevicePtr{p};
  }
  void Free(DevicePtr p) override {
    if (Current().ok()) api_->cuMemFree(p);
  }

  // Pinning is slow (tens of milliseconds for the staging of one long prompt, where the guest's
  // memory is first touched), so freed pinned blocks are kept for the next request, up to
  // kIdlePinnedBytes, in sizes rounded up to 2 MiB; a block is reused for a request of at least
  // half its size.
  Result<std::byte*> AllocatePinned(uint64_t bytes) override {
    constexpr uint64_t kGrain = uint64_t{2} << 20;
    if (bytes == 0 || bytes > (uint64_t{1} << 46)) {
      return InvalidArgumentError("pinned allocation of " + std::to_string(bytes) + " bytes");
    }
    const uint64_t rounded = (bytes + kGrain - 1) / kGrain * kGrain;
    {
      std::lock_guard lock(mu_);
      auto it = idle_pinned_.lower_bound(rounded);
      if (it != idle_pinned_.end() && it->first <= 2 * rounded) {
        std::byte* p = it->second;
        idle_pinned_bytes_ -= it->first;
        idle_pinned_.erase(it);
        return p;
      }
    }
    OC_RETURN_IF_ERROR(Current());
    void* p = nullptr;
    OC_RETURN_IF_ERROR(
        Check(api_->cuMemHostAlloc(&p, rounded, cuda::CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"));
    std::lock_guard lock(mu_);
    pinned_sizes_[static_cast<std::byte*>(p)] = rounded;
    return static_cast<std::byte*>(p);
  }
  void FreePinned(std::byte* p) override {
    {
      std::lock_guard lock(mu_);
      auto it = pinned_sizes_.find(p);
      if (it == pinned_sizes_.end()) return;  // not ours
      if (idle_pinned_bytes_ + it->second <= kIdlePinnedBytes) {
        idle_pinned_bytes_ += it->second;
        idle_pinned_.emplace(it->second, p);
        return;
      }
      pinned_sizes_.erase(it);
    }
    if (Current().ok()) api_->cuMemFreeHost(p);
  }
  ~CudaDevice() override {
    if (!Current().ok()) return;
    for (const auto& [bytes, p] : idle_pinned_) api_->cuMemFreeHost(p);
  }

  Result<std::unique_ptr<Stream>> NewStream() override {
    OC_RETURN_IF_ERROR(Current());
    cuda::CUstream s = nullptr;
    OC_RETURN_IF_ERROR(
        Check(api_->cuStreamCreate(&s, cuda::CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    return Own(std::make_unique<CudaStream>(s, true));
  }
  Result<std::unique_ptr<Stream>> WrapStream(uintptr_t handle) override {
    OC_RETURN_IF_ERROR(Current());
    return Own(std::make_unique<CudaStream>(reinterpret_cast<cuda::CUstream>(handle), false));
  }

  Result<std::unique_ptr<Event>> NewEvent() override {
    OC_RETURN_IF_ERROR(Current());
    cuda::CUevent e = nullptr;
    OC_RETURN_IF_ERROR(
        Check(api_->cuEventCreate(&e, cuda::CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    auto event = std::make_unique<CudaEvent>(e);
    event->release = [this, e] {
      if (Current().ok()) api_->cuEventDestroy(e);
    };
    return std::unique_ptr<Event>(std::move(event));
  }

  Status CopyToDevice(Stream& stream, DevicePtr dst, const std::byte* host,
                      uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(&stream, 1, bytes, 0);
    return Check(api_->cuMemcpyHtoDAsync(dst, host, bytes, S(stream)), "cuMemcpyHtoDAsync");
  }
  Status CopyToHost(Stream& stream, std::byte* host, DevicePtr src, uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(&stream, 1, 0, bytes);
    return Check(api_->cuMemcpyDtoHAsync(host, src, bytes, S(stream)), "cuMemcpyDtoHAsync");
  }

  Result<std::unique_ptr<SegmentTable>> UploadSegments(
      std::span<const CopySegment> segments) override {
    OC_RETURN_IF_ERROR(Current());
    if (segments.empty()) return std::unique_ptr<SegmentTable>(new CudaTable(0, 0));
    const uint64_t bytes = segments.size_bytes();
    CUdeviceptr p = 0;
    OC_RETURN_IF_ERROR(Check(api_->cuMemAlloc(&p, bytes), "cuMemAlloc"));
    if (Status s = Check(api_->cuMemcpyHtoD(p, segments.data(), bytes), "cuMemcpyHtoD"); !s.ok()) {
      api_->cuMemFree(p);
      return s;
    }
    auto table = std::make_unique<CudaTable>(p, segments.size());
    table->release = [this, p] { Free(p); };
    return std::unique_ptr<SegmentTable>(std::move(table));
  }

  Status Scatter(Stream& stream, DevicePtr dst, const std::byte* host, uint64_t host_bytes,
                 const SegmentTable& table, size_t count) override {
    if (count == 0) return Status();
    OC_RETURN_IF_ERROR(Current());
    OC_ASSIGN_OR_RETURN(CUdeviceptr scratch, Scratch(stream, host_bytes));
    counter_.Count(&stream, 2, host_bytes, 0);
    OC_RETURN_IF_ERROR(
        Check(api_->cuMemcpyHtoDAsync(scratch, host, host_bytes, S(stream)), "cuMemcpyHtoDAsync"));
    return LaunchKernel(stream, false, scratch, dst, table, count);
  }

  Status Gather(Stream& stream, std::byte* host, uint64_t host_bytes, DevicePtr src,
                const SegmentTable& table, size_t count) override {
    if (count == 0) return Status();
    OC_RETURN_IF_ERROR(Current());
    OC_ASSIGN_OR_RETURN(CUdeviceptr scratch, Scratch(stream, host_bytes));
    counter_.Count(&stream, 2, 0, host_bytes);
    // The gather kernel reads the table the other way: segment.dst of `src` to segment.src.
    OC_RETURN_IF_ERROR(LaunchKernel(stream, true, src, scratch, table, count));
    return Check(api_->cuMemcpyDtoHAsync(host, scratch, host_bytes, S(stream)),
                 "cuMemcpyDtoHAsync");
  }

  Status Record(Event& event, Stream& stream) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(&stream, 1);
    return Check(api_->cuEventRecord(E(event), S(stream)), "cuEventRecord");
  }
  Result<bool> Done(Event& event) override {
    OC_RETURN_IF_ERROR(Current());
    const cuda::CUresult r = api_->cuEventQuery(E(event));
    if (r == cuda::CUDA_ERROR_NOT_READY) return false;
    OC_RETURN_IF_ERROR(Check(r, "cuEventQuery"));
    return true;
  }
  Status Wait(Event& event) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(nullptr, 1);
    return Check(api_->cuEventSynchronize(E(event)), "cuEventSynchronize");
  }
  Status StreamWait(Stream& stream, Event& event) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(&stream, 1);
    return Check(api_->cuStreamWaitEvent(S(stream), E(event), 0), "cuStreamWaitEvent");
  }
  Status Synchronize(Stream& stream) override {
    OC_RETURN_IF_ERROR(Current());
    counter_.Count(&stream, 1);
    return Check(api_->cuStreamSynchronize(S(stream)), "cuStreamSynchronize");
  }

  DeviceCounters Counters() const override { return counter_.Get(); }

 private:
  Status Current() const { return cuda::MakeCurrent(ordinal_); }
  static cuda::CUstream S(Stream& s) { return static_cast<CudaStream&>(s).stream; }
  static cuda::CUevent E(Event& e) { return static_cast<CudaEvent&>(e).event; }

  std::unique_ptr<Stream> Own(std::unique_ptr<CudaStream> s) {
    CudaStream* raw = s.get();
    s->release = [this, raw] {
      if (!Current().ok()) return;
      if (raw->scratch) {
        api_->cuStreamSynchronize(raw->stream);
        api_->cuMemFree(raw->scratch);
      }
      if (raw->owned) api_->cuStreamDestroy(raw->stream);
    };
    return s;
  }

  // The stream's scratch, at least `bytes`; a larger one replaces it once the stream's work on
  // the old one is done.
  Result<CUdeviceptr> Scratch(Stream& stream, uint64_t bytes) {
    CudaStream& s = static_cast<CudaStream&>(stream);
    if (s.scratch_bytes >= bytes) return s.scratch;
    if (s.scratch) {
      OC_RETURN_IF_ERROR(Check(api_->cuStreamSynchronize(s.stream), "cuStreamSynchronize"));
      api_->cuMemFree(s.scratch);
      s.scratch = 0;
      s.scratch_bytes = 0;
    }
    OC_RETURN_IF_ERROR(Check(api_->cuMemAlloc(&s.scratch, bytes), "cuMemAlloc"));
    s.scratch_bytes = bytes;
    return s.scratch;
  }

  // The copy kernel and its reverse twin, loaded from the PTX on first use.
  Result<cuda::CUfunction> Kernel(bool reverse) {
    std::lock_guard lock(mu_);
    if (!module_) {
      OC_RETURN_IF_ERROR(Check(api_->cuModuleLoadData(&module_, kCopyKernelPtx),
                               "cuModuleLoadData (the copy kernel's PTX)"));
    }
    cuda::CUfunction& f = reverse ? gather_ : scatter_;
    if (!f) {
      OC_RETURN_IF_ERROR(Check(
          api_->cuModuleGetFunction(
              &f, module_, reverse ? "objectcache_gather_segments" : "objectcache_copy_segments"),
          "cuModuleGetFunction"));
    }
    return f;
  }

  Status LaunchKernel(Stream& stream, bool reverse, CUdeviceptr from, CUdeviceptr to,
                      const SegmentTable& table, size_t count) {
    if (count > table.size()) return InvalidArgumentError("more segments than the table holds");
    OC_ASSIGN_OR_RETURN(cuda::CUfunction f, Kernel(reverse));
    CUdeviceptr segments = static_cast<const CudaTable&>(table).segments;
    unsigned long long n = count;
    void* params[] = {&from, &to, &segments, &n};
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>(count, 4096));
    return Check(api_->cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, S(stream), params, nullptr),
                 "cuLaunchKernel");
  }

  const cuda::DriverApi* const api_;
  const int ordinal_;
  const std::string name_;
  mutable std::mutex mu_;
  CallCounter counter_;
  cuda::CUmodule module_ = nullptr;                        // guarded by mu_
  cuda::CUfunction scatter_ = nullptr, gather_ = nullptr;  // guarded by mu_
  static constexpr uint64_t kIdlePinnedBytes = uint64_t{1} << 30;
  std::map<std::byte*, uint64_t> pinned_sizes_;      // guarded by mu_: every block of ours
  std::multimap<uint64_t, std::byte*> idle_pinned_;  // guarded by mu_: freed, by size
  uint64_t idle_pinned_bytes_ = 0;                   // guarded by mu_
};

}  // namespace

Result<std::shared_ptr<Device>> OpenCudaDevice(int ordinal) {
  OC_RETURN_IF_ERROR(cuda::MakeCurrent(ordinal));
  return std::shared_ptr<Device>(new CudaDevice(*cuda::Driver(), ordinal));
}

}  // namespace objectcache::device
