// objectcache._native's device side: Device (a GPU through CUDA, or the emulated device), and
// retrieval into and saves from paged KV caches held in torch CUDA tensors
// (include/objectcache/device_kv.h, docs/gpu.md).
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "objectcache/device_kv.h"
#include "python/native_support.h"

namespace objectcache::python {

class PyDevice {
 public:
  PyDevice(const std::string& spec, double copy_delay_ms);
  explicit PyDevice(std::shared_ptr<device::Device> d) : device_(std::move(d)) {}
  ~PyDevice();

  const std::shared_ptr<device::Device>& device() const { return device_; }
  std::string name() const { return device_->name(); }
  bool emulated() const { return device_->emulated(); }
  uint64_t Allocate(uint64_t bytes);
  void Free(uint64_t p);
  // A stream of the device, alive as long as this object; its handle.
  uintptr_t NewStream();
  void Synchronize(uintptr_t stream);

 private:
  std::shared_ptr<device::Device> device_;
  std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<device::Stream>> streams_;  // guarded by mu_
};

// The paged caches of a transfer, read from their tensors.
struct DeviceCaches {
  DeviceKvTarget target;
  int device_index = 0;  // the tensors' CUDA device
  py::list owners;       // the tensors, kept alive while the transfer runs
};

// Statistics of a transfer as a dict (DeviceTransferStats' fields by name).
py::dict StatsDict(const DeviceTransferStats& s);
// A stream argument on the device of `caches`: None (the current stream of the device: torch's
// for a GPU, the default stream of the emulated device), an int handle, or an object with
// .cuda_stream (torch.cuda.Stream).
std::unique_ptr<device::Stream> StreamArgument(py::handle stream, const DeviceCaches& caches);

// What a retrieval and a save share: the transfer (a DeviceRetrieval or a DeviceSave), ended with
// the GIL released since its threads may wait on Python, and the caches it holds alive.
template <typename Transfer>
class PyDeviceTransfer {
 public:
  PyDeviceTransfer(std::unique_ptr<Transfer> t, DeviceCaches caches)
      : transfer_(std::move(t)), caches_(std::move(caches)) {}
  ~PyDeviceTransfer() {
    py::gil_scoped_release release;  // waits for the transfer's threads
    transfer_.reset();
  }
  void Wait() {
    Check(Released([&] { return transfer_->Wait(); }));
  }
  py::dict Stats() const { return StatsDict(transfer_->Stats()); }

 protected:
  std::unique_ptr<Transfer> transfer_;
  DeviceCaches caches_;
};

class PyDeviceRetrieval : public PyDeviceTransfer<DeviceRetrieval> {
 public:
  using PyDeviceTransfer::PyDeviceTransfer;
  uint32_t Hits();
  void WaitForLayer(uint32_t layer);
  void StreamWaitForLayer(uint32_t layer, py::handle stream);
};

class PyDeviceSave : public PyDeviceTransfer<DeviceSave> {
 public:
  using PyDeviceTransfer::PyDeviceTransfer;
  void SaveLayer(uint32_t layer, py::handle stream);
  bool dropped() const { return transfer_->dropped(); }
};

// Reads one paged cache tensor per layer (`expect` of them) whose dimensions are named by
// `order` ("2BNHD" for FLASH_ATTN, "B2NHD" FlashInfer, "B2HND", "BHNX" with K and V packed in
// X = 2 x head_dim, "BNC" or "B1NC" for MLA; see docs/gpu.md), on a CUDA device (the emulated one
// standing in when `device` is given).
DeviceCaches ReadDeviceCaches(py::handle caches, size_t expect, const KvLayout& kv,
                              const std::string& order, py::iterable block_ids,
                              py::handle first_token, py::object device, bool writable);

void BindDevices(py::module_& m);

}  // namespace objectcache::python
