// The GPU initiator's host side: registers the controller's shared memory with CUDA (mapped,
// so the GPU addresses queue memory, doorbells and data region directly) and launches the
// kernel of gpu_kernel.cu per batch.
#include "nvmekv/gpu_initiator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "nvmekv/gpu_kernel.h"

namespace objectcache::nvmekv {
namespace {

Status CudaError(std::string_view what, int code) {
  auto e = static_cast<cudaError_t>(code);
  return UnavailableError(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

class CudaInitiator final : public GpuInitiator {
 public:
  CudaInitiator(const SharedMemory& mem, RawQueuePair raw, std::string name, int clock_khz)
      : mem_(mem), raw_(raw), name_(std::move(name)), clock_khz_(clock_khz) {}

  ~CudaInitiator() override {
    if (entries_dev_) cudaFree(entries_dev_);
    if (out_dev_) cudaFree(out_dev_);
    if (status_dev_) cudaFree(status_dev_);
    if (registered_) cudaHostUnregister(mem_.base());
  }

  Status Init() {
    int e = cudaHostRegister(mem_.base(), mem_.size(), cudaHostRegisterMapped);
    if (e != cudaSuccess) return CudaError("registering the controller's shared memory", e);
    registered_ = true;
    void* dev = nullptr;
    e = cudaHostGetDevicePointer(&dev, mem_.base(), 0);
    if (e != cudaSuccess) return CudaError("mapping the shared memory into the GPU", e);
    auto at = [&](const void* host_ptr) {
      return reinterpret_cast<uint32_t*>(static_cast<std::byte*>(dev) +
                                         (static_cast<const std::byte*>(host_ptr) - mem_.base()));
    };
    q_.sq = at(raw_.sq);
    q_.cq = at(raw_.cq);
    q_.sq_tail_doorbell = at(raw_.sq_tail_doorbell);
    q_.cq_head_doorbell = at(raw_.cq_head_doorbell);
    q_.entries = raw_.entries;
    q_.sq_tail = raw_.sq_tail;
    q_.cq_head = raw_.cq_head;
    q_.cq_phase = raw_.cq_phase ? 1 : 0;
    const size_t most = std::min<size_t>(1024, raw_.entries - 1);
    if ((e = cudaMalloc(&entries_dev_, most * 64)) != cudaSuccess ||
        (e = cudaMalloc(&out_dev_, most * 16)) != cudaSuccess ||
        (e = cudaMalloc(&status_dev_, sizeof(uint32_t))) != cudaSuccess) {
      return CudaError("allocating GPU memory for a batch", e);
    }
    return Status();
  }

  Status RunBatch(std::span<const SubmissionEntry> entries, std::span<CompletionEntry> out,
                  std::chrono::milliseconds timeout) override {
    const size_t n = entries.size();
    if (n == 0) return Status();
    if (n > std::min<size_t>(1024, q_.entries - 1) || out.size() < n) {
      return InvalidArgumentError("a GPU batch holds 1 to min(1024, queue entries - 1) commands");
    }
    if (broken_) return UnavailableError("the GPU queue is unusable after a timeout");
    int e = cudaMemcpy(entries_dev_, entries.data(), n * 64, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemset(status_dev_, 0, sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMemset(out_dev_, 0, n * 16);
    if (e != cudaSuccess) return CudaError("staging a GPU batch", e);
    const long long cycles = static_cast<long long>(clock_khz_) * timeout.count();
    e = LaunchKeyValueBatch(q_, static_cast<const uint32_t*>(entries_dev_),
                            static_cast<uint32_t*>(out_dev_), static_cast<uint32_t>(n), cycles,
                            static_cast<uint32_t*>(status_dev_));
    if (e != cudaSuccess) return CudaError("running the GPU batch", e);
    uint32_t status = 0;
    e = cudaMemcpy(&status, status_dev_, sizeof status, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(out.data(), out_dev_, n * 16, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return CudaError("reading the GPU batch's completions", e);
    if (status != 0) {
      broken_ = true;
      return Status(StatusCode::kDeadlineExceeded, "GPU batch: a completion did not come within " +
                                                       std::to_string(timeout.count()) + " ms");
    }
    q_.sq_tail = static_cast<uint32_t>((q_.sq_tail + n) % q_.entries);
    const uint32_t head = static_cast<uint32_t>(q_.cq_head + n);
    if (head >= q_.entries) q_.cq_phase ^= 1;
    q_.cq_head = head % q_.entries;
    return Status();
  }

  std::string device_name() const override { return name_; }

 private:
  const SharedMemory& mem_;
  RawQueuePair raw_;
  std::string name_;
  int clock_khz_;
  GpuQueueState q_;
  void* entries_dev_ = nullptr;
  void* out_dev_ = nullptr;
  void* status_dev_ = nullptr;
  bool registered_ = false;
  bool broken_ = false;
};

}  // namespace

Result<std::unique_ptr<GpuInitiator>> GpuInitiator::Create(Host& host, QueuePair& queue) {
  int count = 0;
  int e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return CudaError("looking for a CUDA device", e);
  if (count == 0) return UnavailableError("no CUDA device");
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
    return CudaError("reading the CUDA device", e);
  int clock_khz = 0;
  if ((e = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0)) != cudaSuccess) {
    return CudaError("reading the GPU clock rate", e);
  }
  // Timeouts are counted in clock cycles: with no rate reported, assume a fast clock (2 GHz),
  // which makes a timeout longer, never shorter, than asked on any slower one.
  if (clock_khz <= 0) clock_khz = 2000000;
  auto g = std::make_unique<CudaInitiator>(host.memory(), queue.raw(), prop.name, clock_khz);
  OC_RETURN_IF_ERROR(g->Init());
  return std::unique_ptr<GpuInitiator>(std::move(g));
}

}  // namespace objectcache::nvmekv
