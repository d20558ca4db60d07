#include "python/device_binding.h"

#include <set>

namespace objectcache::python {
namespace {

// The device of CUDA tensors on GPU `index`, opened once per process.
std::shared_ptr<device::Device> CudaDevice(int index) {
  static std::mutex mu;
  static std::map<int, std::shared_ptr<device::Device>> opened;
  std::lock_guard lock(mu);
  auto it = opened.find(index);
  if (it != opened.end()) return it->second;
  Result<std::shared_ptr<device::Device>> d = device::OpenCudaDevice(index);
  if (!d) Raise(d.error());
  opened[index] = *d;
  return *d;
}

// A stream argument: None (the current stream of the device: torch's for a GPU, the default
// stream of the emulated device), an int handle, or an object with .cuda_stream
// (torch.cuda.Stream).
uintptr_t StreamHandle(py::handle stream, const device::Device& d, int index) {
  if (stream.is_none()) {
    if (d.emulated()) return 0;
    py::object torch = py::module_::import("torch");
    return torch.attr("cuda").attr("current_stream")(index).attr("cuda_stream").cast<uintptr_t>();
  }
  if (py::hasattr(stream, "cuda_stream")) return stream.attr("cuda_stream").cast<uintptr_t>();
  if (py::isinstance<py::int_>(stream)) return stream.cast<uintptr_t>();
  throw py::type_error("a stream is None, an int handle or a torch.cuda.Stream");
}

std::unique_ptr<device::Stream> Wrap(device::Device& d, uintptr_t handle) {
  Result<std::unique_ptr<device::Stream>> s = d.WrapStream(handle);
  return Take(s);
}

}  // namespace

std::unique_ptr<device::Stream> StreamArgument(py::handle stream, const DeviceCaches& caches) {
  device::Device& d = *caches.target.device;
  return Wrap(d, StreamHandle(stream, d, caches.device_index));
}

py::dict StatsDict(const DeviceTransferStats& s) {
  py::dict d;
  d["staging_bytes"] = s.staging_bytes;
  d["layers"] = s.layers;
  d["bytes"] = s.bytes;
  d["driver_calls"] = s.driver_calls;
  d["seconds"] = s.seconds;
  return d;
}

namespace {

// One layer's tensor read as a paged layout: its base, its device and where its vectors are.
struct PagedTensor {
  device::DevicePtr base = 0;
  int device_index = 0;
  PagedKvLayout paged;
};

int64_t NonNegative(py::handle v, const std::string& what) {
  const int64_t n = v.cast<int64_t>();
  if (n < 0) throw py::value_error(what + " is negative");
  return n;
}

PagedTensor ReadTensor(py::handle t, const KvLayout& kv, const std::string& order, bool writable,
                       const std::string& what) {
  if (!IsTensor(t)) throw py::type_error(what + " is not a torch tensor");
  const std::string type = py::str(t.attr("device").attr("type")).cast<std::string>();
  if (type == "cpu") {
    throw py::value_error(what +
                          " is on the CPU: retrieve_layerwise and start_save take CPU "
                          "tensors, the device transfers CUDA ones");
  }
  if (type != "cuda") throw py::value_error(what + " is on " + type + "; only CUDA is supported");
  const std::string dtype = TensorDtype(t);
  if (!DtypeMatches(dtype, kv.dtype)) {
    throw py::type_error(what + " is " + dtype + " but the layout's dtype is " +
                         std::string(KvDtypeName(kv.dtype)));
  }
  if (writable && t.attr("requires_grad").cast<bool>()) {
    throw py::value_error(what + " requires grad; pass a tensor without it");
  }
  const py::tuple shape = t.attr("shape");
  const py::tuple stride = t.attr("stride")();
  if (shape.size() != order.size()) {
    throw py::value_error(what + " has " + std::to_string(shape.size()) + " dimensions; order '" +
                          order + "' names " + std::to_string(order.size()));
  }
  const bool latent = kv.kind == KvKind::kLatent;
  // X: K and V packed in one dimension of 2 x head_dim (vLLM since #44455).
  const bool packed = order.find('X') != std::string::npos;
  const std::string needed = latent ? "BNC" : packed ? "BNHX" : "2BNHD";
  const uint64_t elem = t.attr("element_size")().cast<uint64_t>();
  std::map<char, std::pair<uint64_t, uint64_t>> dims;  // letter -> (size, stride in bytes)
  uint64_t extent = elem;                              // the last byte's offset + 1
  for (size_t i = 0; i < order.size(); ++i) {
    const char c = order[i];
    const uint64_t size = NonNegative(shape[i], what + "'s shape");
    const uint64_t step = NonNegative(stride[i], what + "'s stride") * elem;
    if (c == '1') {
      if (size != 1) throw py::value_error(what + ": dimension " + std::to_string(i) + " is not 1");
      continue;
    }
    if (needed.find(c) == std::string::npos || dims.count(c)) {
      throw py::value_error("order '" + order + "' must name each of " + needed +
                            " once (and 1 for dimensions of size 1)");
    }
    if (size == 0) throw py::value_error(what + " is empty");
    dims[c] = {size, step};
    uint64_t reach = 0;
    if (__builtin_mul_overflow(size - 1, step, &reach) ||
        __builtin_add_overflow(extent, reach, &extent)) {
      throw py::value_error(what + " spans more than 2^64 bytes");
    }
  }
  if (dims.size() != needed.size()) {
    throw py::value_error("order '" + order + "' must name each of " + needed + " once");
  }
  const char vec_dim = latent ? 'C' : packed ? 'X' : 'D';
  auto expect = [&](char c, uint64_t n, const char* name) {
    if (dims[c].first != n) {
      throw py::value_error(what + ": dimension " + std::string(1, c) + " is " +
                            std::to_string(dims[c].first) + ", the layout's " + name + " " +
                            std::to_string(n));
    }
  };
  expect(vec_dim, packed ? 2 * uint64_t{kv.head_dim} : kv.head_dim,
         latent   ? "latent width"
         : packed ? "2 x head_dim"
                  : "head_dim");
  if (!latent) {
    if (!packed) expect('2', 2, "K and V");
    expect('H', kv.num_kv_heads, "kv_heads");
  }
  if (dims[vec_dim].second != elem && kv.head_dim > 1) {
    throw py::value_error(what + ": the " + std::string(1, vec_dim) +
                          " dimension is not contiguous (stride " +
                          std::to_string(dims[vec_dim].second / elem) + ")");
  }
  if (dims['N'].first > UINT32_MAX) throw py::value_error(what + ": blocks are too large");
  PagedTensor out;
  out.base = t.attr("data_ptr")().cast<uint64_t>();
  const py::object index = t.attr("device").attr("index");
  out.device_index = index.is_none() ? 0 : index.cast<int>();
  out.paged = {.block_size = static_cast<uint32_t>(dims['N'].first),
               .num_blocks = dims['B'].first,
               .block_stride = dims['B'].second,
               .token_stride = dims['N'].second,
               .head_stride = latent ? dims['C'].first * elem : dims['H'].second,
               .kv_stride = latent   ? 0
                            : packed ? kv.head_dim * elem
                                     : dims['2'].second,
               .layer_bytes = extent};
  return out;
}

bool SamePaged(const PagedKvLayout& a, const PagedKvLayout& b) {
  return a.block_size == b.block_size && a.num_blocks == b.num_blocks &&
         a.block_stride == b.block_stride && a.token_stride == b.token_stride &&
         a.head_stride == b.head_stride && a.kv_stride == b.kv_stride &&
         a.layer_bytes == b.layer_bytes;
}

}  // namespace

PyDevice::PyDevice(const std::string& spec, double copy_delay_ms) {
  if (!(copy_delay_ms >= 0 && copy_delay_ms <= 10000)) {
    throw py::value_error("copy_delay_ms must be in [0, 10000]");
  }
  if (spec == "emulated") {
    device_ = device::NewEmulatedDevice(
        {.copy_delay = std::chrono::microseconds(static_cast<int64_t>(copy_delay_ms * 1000))});
    return;
  }
  Result<std::shared_ptr<device::Device>> d = device::OpenDevice(spec);
  if (!d && d.error().code() == StatusCode::kInvalidArgument) {
    throw py::value_error(d.error().message());
  }
  device_ = Take(d);
}

PyDevice::~PyDevice() {
  py::gil_scoped_release release;  // a stream's end waits for its work
  streams_.clear();
  device_.reset();
}

uint64_t PyDevice::Allocate(uint64_t bytes) {
  Result<device::DevicePtr> p = device_->Allocate(bytes);
  return Take(p);
}

void PyDevice::Free(uint64_t p) { device_->Free(p); }

uintptr_t PyDevice::NewStream() {
  Result<std::unique_ptr<device::Stream>> s = device_->NewStream();
  std::unique_ptr<device::Stream> stream = Take(s);
  const uintptr_t handle = stream->handle();
  std::lock_guard lock(mu_);
  streams_[handle] = std::move(stream);
  return handle;
}

void PyDevice::Synchronize(uintptr_t handle) {
  std::unique_ptr<device::Stream> s = Wrap(*device_, handle);
  Check(Released([&] { return device_->Synchronize(*s); }));
}

DeviceCaches ReadDeviceCaches(py::handle caches, size_t expect, const KvLayout& kv,
                              const std::string& order, py::iterable block_ids,
                              py::handle first_token, py::object device, bool writable) {
  DeviceCaches out;
  if (IsTensor(caches)) {
    out.owners.append(caches);
  } else {
    for (py::handle h : py::iterable(py::reinterpret_borrow<py::object>(caches))) {
      out.owners.append(h);
    }
  }
  if (out.owners.size() != expect) {
    throw py::value_error("expected " + std::to_string(expect) + " layer tensors, got " +
                          std::to_string(out.owners.size()));
  }
  int index = 0;
  for (size_t i = 0; i < out.owners.size(); ++i) {
    const PagedTensor t =
        ReadTensor(out.owners[i], kv, order, writable, "layer tensor " + std::to_string(i));
    if (i == 0) {
      out.target.paged = t.paged;
      index = t.device_index;
    } else if (!SamePaged(t.paged, out.target.paged) || t.device_index != index) {
      throw py::value_error("layer tensor " + std::to_string(i) +
                            " differs from layer tensor 0 in shape, strides or device");
    }
    out.target.layer_bases.push_back(t.base);
  }
  std::set<uint32_t> seen;
  // Block ids are 32 bits; a cache of no blocks holds none.
  const uint64_t n = std::min<uint64_t>(out.target.paged.num_blocks, uint64_t{1} << 32);
  const std::string range = "the cache's " + std::to_string(n) + " blocks";
  for (py::handle h : block_ids) {
    const uint64_t b = IntInRange(h, n == 0 ? 0 : n - 1, "block", range);
    if (b >= n) throw py::value_error("block " + std::to_string(b) + " is outside " + range);
    if (!seen.insert(static_cast<uint32_t>(b)).second) {
      throw py::value_error("block " + std::to_string(b) + " is named twice");
    }
    out.target.block_ids.push_back(static_cast<uint32_t>(b));
  }
  out.target.first_token = IntInRange(first_token, UINT64_MAX, "first_token", "0..2**64-1");
  out.device_index = index;
  if (!device.is_none()) {
    out.target.device = device.cast<PyDevice&>().device();
  } else {
    out.target.device = CudaDevice(index);
  }
  return out;
}

uint32_t PyDeviceRetrieval::Hits() {
  Result<uint32_t> h = Released([&] { return transfer_->Hits(); });
  return Take(h);
}

void PyDeviceRetrieval::WaitForLayer(uint32_t layer) {
  CheckArgument(Released([&] { return transfer_->WaitForLayer(layer); }));
}

void PyDeviceRetrieval::StreamWaitForLayer(uint32_t layer, py::handle stream) {
  std::unique_ptr<device::Stream> s = StreamArgument(stream, caches_);
  CheckArgument(Released([&] { return transfer_->StreamWaitForLayer(layer, *s); }));
}

void PyDeviceSave::SaveLayer(uint32_t layer, py::handle stream) {
  std::unique_ptr<device::Stream> s = StreamArgument(stream, caches_);
  CheckArgument(Released([&] { return transfer_->SaveLayer(layer, *s); }));
}

void BindDevices(py::module_& m) {
  py::class_<PyDevice>(m, "Device", R"doc(
A device that holds KV caches: "cuda:N" (a GPU through the CUDA driver) or "emulated" (host
memory standing in for device memory, copies on worker threads, each delayed by copy_delay_ms:
for tests on machines without a GPU).

Device(spec="cuda:0", copy_delay_ms=0))doc")
      .def(py::init<const std::string&, double>(), py::arg("spec") = "cuda:0",
           py::arg("copy_delay_ms") = 0.0)
      .def_property_readonly("name", &PyDevice::name)
      .def_property_readonly("emulated", &PyDevice::emulated)
      .def("allocate", &PyDevice::Allocate, py::arg("nbytes"),
           "Device memory; its address (on the emulated device, host memory readable there).")
      .def("free", &PyDevice::Free, py::arg("address"))
      .def("new_stream", &PyDevice::NewStream,
           "A stream of the device (alive as long as this object); its handle.")
      .def("synchronize", &PyDevice::Synchronize, py::arg("stream") = 0,
           "Blocks until the stream's work so far is done.");

  py::class_<PyDeviceRetrieval>(m, "DeviceRetrieval",
                                "A retrieval into paged KV caches in device memory, in flight.")
      .def_property_readonly("hits", &PyDeviceRetrieval::Hits)
      .def("wait_for_layer", &PyDeviceRetrieval::WaitForLayer, py::arg("layer"),
           "Blocks until the layer's bytes are in its blocks; raises Error if they never will be.")
      .def("stream_wait_for_layer", &PyDeviceRetrieval::StreamWaitForLayer, py::arg("layer"),
           py::arg("stream") = py::none(),
           "Blocks until the layer is verified and its copy enqueued, then makes `stream` (None: "
           "the current CUDA stream) wait for the copy, without waiting for it here.")
      .def("wait", &PyDeviceRetrieval::Wait)
      .def("stats", &PyDeviceRetrieval::Stats,
           "{staging_bytes, layers, bytes, driver_calls, seconds}");

  py::class_<PyDeviceSave>(m, "DeviceSave", "A save of new chunks from paged device KV caches.")
      .def("save_layer", &PyDeviceSave::SaveLayer, py::arg("layer"), py::arg("stream") = py::none(),
           "Layer `layer` is computed by the work on `stream` so far (None: the current CUDA "
           "stream): copies it off the device once that work is done, without waiting for it.")
      .def("wait", &PyDeviceSave::Wait,
           "Blocks until every layer given is off the device and in the chunk objects.")
      .def_property_readonly("dropped", &PyDeviceSave::dropped)
      .def("stats", &PyDeviceSave::Stats);
}

}  // namespace objectcache::python
