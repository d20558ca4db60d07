#include <cuda_runtime.h>

#include "nvmekv/gpu_kernel.h"

namespace objectcache::nvmekv {
namespace {

__global__ void KeyValueBatchKernel(GpuQueueState q, const uint32_t* entries, uint32_t* out,
                                    uint32_t n, long long timeout_cycles, uint32_t* status) {
  const uint32_t i = threadIdx.x;
  if (i < n) {
    volatile uint32_t* slot = q.sq + 16u * ((q.sq_tail + i) % q.entries);
    for (int w = 0; w < 16; ++w) {
      uint32_t v = entries[16u * i + w];
      if (w == 0) v = (v & 0xffffu) | (i << 16);  // command id = the entry's index
      slot[w] = v;
    }
  }
  // Every entry reaches host memory before the doorbell says it is there.
  __threadfence_system();
  __syncthreads();
  if (i == 0) {
    *reinterpret_cast<volatile uint32_t*>(q.sq_tail_doorbell) = (q.sq_tail + n) % q.entries;
    __threadfence_system();
  }
  if (i < n) {
    const uint32_t pos = q.cq_head + i;
    const uint32_t phase = q.cq_phase ^ ((pos / q.entries) & 1u);
    volatile uint32_t* cqe = q.cq + 4u * (pos % q.entries);
    const long long start = clock64();
    bool arrived = true;
    while (((cqe[3] >> 16) & 1u) != phase) {
      if (clock64() - start > timeout_cycles) {
        arrived = false;
        break;
      }
      __nanosleep(256);
    }
    if (arrived) {
      // The phase tag is new: fence, then read the whole entry again, so DW0-2 are never older
      // than the tag that announced them.
      __threadfence_system();
      const uint32_t dw3 = cqe[3];
      const uint32_t cid = dw3 & 0xffffu;
      if (cid < n) {
        out[4u * cid + 0] = cqe[0];
        out[4u * cid + 1] = cqe[1];
        out[4u * cid + 2] = cqe[2];
        out[4u * cid + 3] = dw3;
      }
    } else {
      atomicExch(status, 1u);
    }
  }
  __syncthreads();
  if (i == 0 && atomicAdd(status, 0u) == 0) {
    *reinterpret_cast<volatile uint32_t*>(q.cq_head_doorbell) = (q.cq_head + n) % q.entries;
    __threadfence_system();
  }
}

}  // namespace

int LaunchKeyValueBatch(const GpuQueueState& q, const uint32_t* entries_dev, uint32_t* out_dev,
                        uint32_t n, long long timeout_cycles, uint32_t* status_dev) {
  KeyValueBatchKernel<<<1, n>>>(q, entries_dev, out_dev, n, timeout_cycles, status_dev);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return static_cast<int>(e);
}

}  // namespace objectcache::nvmekv
