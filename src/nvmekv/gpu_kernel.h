// The GPU initiator's kernel and its launcher (gpu_kernel.cu), in plain types so that C++23
// code can call it without including CUDA's headers (nvcc compiles only this part).
#pragma once

#include <cstdint>

namespace objectcache::nvmekv {

// A queue pair as the GPU sees it: device addresses of host memory mapped into the GPU.
struct GpuQueueState {
  uint32_t* sq = nullptr;  // 16 dwords per entry
  uint32_t* cq = nullptr;  // 4 dwords per entry
  uint32_t* sq_tail_doorbell = nullptr;
  uint32_t* cq_head_doorbell = nullptr;
  uint32_t entries = 0;
  uint32_t sq_tail = 0;
  uint32_t cq_head = 0;
  uint32_t cq_phase = 1;
};

// Launches one block of `n` threads (n <= 1024, n < entries): thread i writes entry i of
// `entries_dev` (16 dwords each, command id set to i) into the submission queue, thread 0 rings
// the doorbell once, thread i waits for completion slot cq_head + i and stores the completion
// whose command id is c at out_dev[4c..4c+3]; thread 0 then writes the CQ head doorbell.
// status_dev[0] becomes 1 if some completion did not come within `timeout_cycles` (the head
// doorbell is then left alone). Returns the CUDA error code of the launch and the wait (0: OK).
int LaunchKeyValueBatch(const GpuQueueState& q, const uint32_t* entries_dev, uint32_t* out_dev,
                        uint32_t n, long long timeout_cycles, uint32_t* status_dev);

}  // namespace objectcache::nvmekv
