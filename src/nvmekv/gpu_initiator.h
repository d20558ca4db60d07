// GPU-initiated key-value commands: a CUDA kernel whose threads write submission entries into a
// queue pair's memory (the controller's shared memory, registered with CUDA and mapped into the
// GPU), one thread rings the doorbell, and the threads poll the completion queue on the GPU,
// each one slot, with a system-scope fence between seeing the phase tag and reading the entry
// (the torn completion Ceph's prototype hit). Values land in the data region, which the GPU
// addresses directly. As in BaM, the controller never knows a GPU is its host.
//
// Built when CMake finds the CUDA compiler (OBJECTCACHE_CUDA); otherwise, and on a machine with
// no CUDA device, Create returns Unavailable. Not thread-safe: one batch at a time.
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "nvmekv/host.h"

namespace objectcache::nvmekv {

class GpuInitiator {
 public:
  // Takes over `queue` (none of its own calls may be made afterwards) of the attached `host`.
  // Unavailable without a CUDA device or CUDA support in this build.
  static Result<std::unique_ptr<GpuInitiator>> Create(Host& host, QueuePair& queue);
  virtual ~GpuInitiator() = default;

  // Runs `entries` from the GPU: one thread per entry writes it (command id = its index), one
  // doorbell write for all, completions polled on the GPU; out[i] is entries[i]'s completion.
  // At most queue entries - 1 per batch. DeadlineExceeded when a completion does not come.
  virtual Status RunBatch(std::span<const SubmissionEntry> entries, std::span<CompletionEntry> out,
                          std::chrono::milliseconds timeout) = 0;
  // The device's name ("NVIDIA H200").
  virtual std::string device_name() const = 0;
};

}  // namespace objectcache::nvmekv
