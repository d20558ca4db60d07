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

class PyDeviceRetrieval {
 public:
  PyDeviceRetrieval(std::unique_ptr<DeviceRetrieval> r, DeviceCaches caches, LayerRange layers)
      : retrieval_(std::move(r)), caches_(std::move(caches)), layers_(layers) {}
  ~PyDeviceRetrieval();
  uint32_t Hits();
  void WaitForLayer(uint32_t layer);
  void StreamWaitForLayer(uint32_t layer, py::handle stream);
  void Wait();
  py::dict Stats() const;

 private:
  std::unique_ptr<DeviceRetrieval> retrieval_;
  DeviceCaches caches_;
  LayerRange layers_;
};

class PyDeviceSave {
 public:
  PyDeviceSave(std::unique_ptr<DeviceSave> s, DeviceCaches caches)
      : save_(std::move(s)), caches_(std::move(caches)) {}
  ~PyDeviceSave();
  void SaveLayer(uint32_t layer, py::handle stream);
  void Wait();
  bool dropped() const { return save_->dropped(); }
  py::dict Stats() const;

 private:
  std::unique_ptr<DeviceSave> save_;
  DeviceCaches caches_;
};

// Reads one paged cache tensor per layer (`expect` of them) whose dimensions are named by
// `order` ("2BNHD" for FLASH_ATTN, "B2NHD" FlashInfer, "B2HND", "BHNX" with K and V packed in
// X = 2 x head_dim, "BNC" or "B1NC" for MLA; see docs/gpu.md), on a CUDA device (the emulated one
// standing in when `device` is given).
DeviceCaches ReadDeviceCaches(py::handle caches, size_t expect, const KvLayout& kv,
                              const std::string& order, py::iterable block_ids,
                              uint64_t first_token, py::object device, bool writable);

void BindDevices(py::module_& m);

}  // namespace objectcache::python
