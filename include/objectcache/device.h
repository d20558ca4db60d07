// Devices that hold an engine's KV cache: an NVIDIA GPU through the CUDA driver, or an emulated
// device for machines without one (src/device, docs/gpu.md).
//
// A Device gives what moving KV between host and device memory needs, and nothing more:
// device memory, page-locked (pinned) host memory to stage transfers in, streams on which copies
// run asynchronously in order, events to learn when they are done or to make another stream
// wait for them, and a scatter/gather that moves many slices between one pinned host buffer and
// paged device memory in a few driver calls (one host-to-device copy and one copy kernel on CUDA;
// the kernel is PTX text kept in the repository and compiled by the driver, so no build needs
// nvcc).
//
// The emulated device's "device memory" is separate host memory that only its streams write;
// each stream runs its operations in order on a worker thread of its own, so events complete
// later than the calls that record them, as on a GPU. Tests use it to prove that nothing reads a
// layer before its copy completed: EmulatedDeviceOptions::copy_delay holds every copy back.
//
// Devices are thread-safe; a Stream or Event is used from one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "objectcache/status.h"

namespace objectcache::device {

// An address in a device's memory (a CUdeviceptr on CUDA).
using DevicePtr = uint64_t;

// One piece of a scatter or gather: `bytes` from offset `src` of the source to offset `dst` of
// the destination.
struct CopySegment {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t bytes = 0;
  friend bool operator==(const CopySegment&, const CopySegment&) = default;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // What identifies the stream to the device's WrapStream (a CUstream on CUDA).
  virtual uintptr_t handle() const = 0;
  // Driver calls this object has enqueued (a scatter or gather is two: a copy and a kernel
  // launch; the emulated device counts as CUDA would). Host-side waits are not on a stream.
  std::atomic<uint64_t> driver_calls{0};
};

class Event {
 public:
  virtual ~Event() = default;
};

// A list of CopySegments resident on the device, made once and used by many scatters/gathers.
class SegmentTable {
 public:
  virtual ~SegmentTable() = default;
  virtual size_t size() const = 0;
};

struct DeviceCounters {
  uint64_t driver_calls = 0;  // calls that enqueue work or wait (copies, launches, events)
  uint64_t bytes_to_device = 0;
  uint64_t bytes_to_host = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  // "cuda:0 (NVIDIA H200)", "emulated".
  virtual std::string name() const = 0;
  virtual bool emulated() const = 0;

  // Device memory; ResourceExhausted when it is full.
  virtual Result<DevicePtr> Allocate(uint64_t bytes) = 0;
  virtual void Free(DevicePtr p) = 0;
  // Pinned host memory: asynchronous copies need it (a copy from pageable memory would be
  // synchronous on CUDA).
  virtual Result<std::byte*> AllocatePinned(uint64_t bytes) = 0;
  virtual void FreePinned(std::byte* p) = 0;

  virtual Result<std::unique_ptr<Stream>> NewStream() = 0;
  // The caller's own stream, not owned (an engine's compute stream: torch's
  // current_stream().cuda_stream; 0 for the default stream).
  virtual Result<std::unique_ptr<Stream>> WrapStream(uintptr_t handle) = 0;
  virtual Result<std::unique_ptr<Event>> NewEvent() = 0;

  // Asynchronous copies on `stream`; `host` is pinned and must stay untouched until an event
  // recorded after the copy completes.
  virtual Status CopyToDevice(Stream& stream, DevicePtr dst, const std::byte* host,
                              uint64_t bytes) = 0;
  virtual Status CopyToHost(Stream& stream, std::byte* host, DevicePtr src, uint64_t bytes) = 0;

  // Uploads segments for Scatter and Gather (synchronously; once per transfer, not per layer).
  virtual Result<std::unique_ptr<SegmentTable>> UploadSegments(
      std::span<const CopySegment> segments) = 0;
  // The first `count` segments of `table`, from pinned `host` (segment.src, within
  // host_bytes) to device memory at `dst` (segment.dst), asynchronously on `stream`.
  virtual Status Scatter(Stream& stream, DevicePtr dst, const std::byte* host, uint64_t host_bytes,
                         const SegmentTable& table, size_t count) = 0;
  // The reverse: from device memory at `src` (segment.dst) into pinned `host` (segment.src).
  virtual Status Gather(Stream& stream, std::byte* host, uint64_t host_bytes, DevicePtr src,
                        const SegmentTable& table, size_t count) = 0;

  // Marks the point `stream` has reached; the event completes when the work before it has.
  virtual Status Record(Event& event, Stream& stream) = 0;
  // Whether the work before the event's last Record has completed (its error if it failed).
  virtual Result<bool> Done(Event& event) = 0;
  // Blocks the calling thread until the event completes.
  virtual Status Wait(Event& event) = 0;
  // Makes later work on `stream` wait for the event, without blocking the calling thread.
  virtual Status StreamWait(Stream& stream, Event& event) = 0;
  // Blocks until everything enqueued on `stream` so far has completed.
  virtual Status Synchronize(Stream& stream) = 0;

  virtual DeviceCounters Counters() const = 0;
};

// GPU `ordinal` through the CUDA driver: Unavailable where there is no driver or no such GPU.
Result<std::shared_ptr<Device>> OpenCudaDevice(int ordinal = 0);

struct EmulatedDeviceOptions {
  // Each copy, scatter and gather waits this long on its stream before it runs.
  std::chrono::microseconds copy_delay{0};
  // Device memory the device has; beyond it Allocate answers ResourceExhausted.
  uint64_t memory_bytes = uint64_t{64} << 30;
};
std::shared_ptr<Device> NewEmulatedDevice(EmulatedDeviceOptions options = {});

// "emulated" or "cuda:N" (also "cuda", device 0).
Result<std::shared_ptr<Device>> OpenDevice(const std::string& spec);

}  // namespace objectcache::device
