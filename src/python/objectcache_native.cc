// objectcache._native: the C++ client for Python engines (docs/python.md).
//
// Destinations and sources are torch CPU tensors or any buffer-protocol object; their memory is
// handed to the C++ client as it is (no copy), after checking that it is writable (for
// destinations), contiguous, of the layout's dtype (tensors) and large enough for every slice
// that lands in it. The objects are kept alive by the Retrieval or Save that uses them. The GIL
// is released whenever C++ waits, copies or hashes. Errors of the C++ side raise
// objectcache.Error with .code (the status code's name) and .message; bad arguments raise
// TypeError or ValueError before anything is written.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/page_buffer.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"
#include "python/device_binding.h"
#include "python/host_slices.h"
#include "python/native_support.h"

namespace py = pybind11;
using namespace objectcache;
using namespace objectcache::python;

namespace {

// ---- the Python-facing classes ---------------------------------------------------------------

// The pinned staging of a device transfer, in layers (the transfer refuses 0).
uint32_t StagingLayers(py::handle h) {
  return static_cast<uint32_t>(IntInRange(h, UINT32_MAX, "staging_layers", "1..4294967295"));
}

class PyClient;

class PyRetrieval {
 public:
  PyRetrieval(std::unique_ptr<LayerwiseRetrieval> r, SliceMap map, LayerRange layers)
      : retrieval_(std::move(r)), map_(std::move(map)), layers_(layers) {}
  ~PyRetrieval() {
    py::gil_scoped_release release;  // the destructor waits for the retrieval's threads
    retrieval_.reset();
  }

  uint32_t Hits() {
    Result<uint32_t> h = Released([&] { return retrieval_->Hits(); });
    return Take(h);
  }
  void WaitForLayer(uint32_t layer) {
    if (layer < layers_.first || layer >= layers_.last) {
      throw py::value_error("layer " + std::to_string(layer) + " is not in this retrieval");
    }
    Check(Released([&] { return retrieval_->WaitForLayer(layer); }));
  }
  void Wait() {
    Check(Released([&] { return retrieval_->Wait(); }));
  }

 private:
  std::unique_ptr<LayerwiseRetrieval> retrieval_;
  SliceMap map_;  // keeps the destinations alive
  LayerRange layers_;
};

class PySave {
 public:
  PySave(std::unique_ptr<LayerwiseSave> save, ModelPreset model, size_t chunks)
      : save_(std::move(save)), model_(std::move(model)), chunks_(chunks) {}

  void SaveLayer(uint32_t layer, py::handle source, std::optional<py::iterable> block_ids) {
    if (layer >= model_.layout.num_layers) {
      throw py::value_error("layer " + std::to_string(layer) + " is outside the layout");
    }
    SliceMap map = MapSlices(source, chunks_, model_.layout, 1, block_ids, /*writable=*/false);
    const SliceAddresses& at = *map.at;  // the copy runs while Python goes on
    Check(
        Released([&] { return save_->SaveLayer(layer, [&at](size_t c) { return at.At(0, c); }); }));
  }
  bool dropped() const { return save_->dropped(); }

 private:
  std::unique_ptr<LayerwiseSave> save_;
  ModelPreset model_;
  size_t chunks_;
};

class PyClient {
 public:
  PyClient(std::vector<std::string> endpoints, std::string bucket, ModelPreset model,
           std::optional<std::string> access_key, std::optional<std::string> secret_key,
           py::handle dram_tier_bytes, std::optional<std::string> ca_file, double timeout_seconds,
           py::handle retries, py::handle write_behind_bytes, py::handle parallel_requests,
           py::handle aggregated_streams, bool failover)
      : model_(std::move(model)) {
    // Checked before it becomes a duration (NaN passes any comparison but this one); the other
    // numbers are checked by Client::Create.
    if (!(timeout_seconds > 0 && timeout_seconds <= 86400)) {
      throw py::value_error("timeout must be in (0, 86400] seconds");
    }
    ClientOptions o;
    o.endpoints = std::move(endpoints);
    o.bucket = std::move(bucket);
    o.access_key = access_key.value_or("");
    o.secret_key = secret_key.value_or("");
    // Each count is read whole and named when it is out of range; Client::Create checks the
    // lower bounds.
    o.dram_tier_bytes = IntInRange(dram_tier_bytes, UINT64_MAX, "dram_tier_bytes", "0..2**64-1");
    o.ca_file = ca_file.value_or("");
    o.timeout = std::chrono::seconds(static_cast<int64_t>(timeout_seconds + 0.999));
    o.retries = static_cast<int>(IntInRange(retries, 100, "retries", "0..100"));
    o.write_behind_bytes =
        IntInRange(write_behind_bytes, UINT64_MAX, "write_behind_bytes", "0..2**64-1");
    o.parallel_requests =
        static_cast<int>(IntInRange(parallel_requests, 1024, "parallel_requests", "1..1024"));
    o.aggregated_streams =
        static_cast<int>(IntInRange(aggregated_streams, 8, "aggregated_streams", "0..8"));
    o.failover = failover;
    Result<std::unique_ptr<Client>> client = Client::Create(o);
    client_ = std::shared_ptr<Client>(TakeArgument(client).release());
  }
  ~PyClient() {
    py::gil_scoped_release release;  // the write-behind thread drains first
    client_.reset();
  }

  const ModelPreset& model() const { return model_; }

  size_t Lookup(py::iterable keys_obj) {
    std::vector<ChunkKey> keys = ToKeys(keys_obj);
    if (keys.empty()) return 0;
    Result<size_t> n = Released([&] { return client_->Lookup(keys); });
    return Take(n);
  }

  py::list Pin(py::iterable keys_obj, double ttl_seconds) {
    std::vector<ChunkKey> keys = ToKeys(keys_obj);
    if (!(ttl_seconds >= 1 && ttl_seconds <= 365.0 * 86400)) {
      throw py::value_error("ttl_seconds must be between 1 second and a year");
    }
    Result<std::vector<ChunkKey>> missing = Released([&] {
      return client_->Pin(keys, std::chrono::seconds(static_cast<int64_t>(ttl_seconds)));
    });
    return KeyList(Take(missing));
  }

  // The keys, layers, mode and compute pace of a retrieval, checked.
  LayerwiseRequest NewRequest(py::iterable keys_obj, py::handle layers_obj, const std::string& mode,
                              double compute_seconds_per_layer = 0) {
    if (!(compute_seconds_per_layer >= 0 && compute_seconds_per_layer < 3600)) {
      throw py::value_error("compute_seconds_per_layer must be in [0, 3600)");
    }
    LayerwiseRequest req;
    req.compute_seconds_per_layer = compute_seconds_per_layer;
    req.model = model_;
    req.keys = ToKeys(keys_obj);
    if (req.keys.empty()) throw py::value_error("no keys to retrieve");
    req.layers = ToRange(layers_obj, model_.layout);
    req.mode = OrValueError(ParseRetrievalMode(mode));
    return req;
  }

  std::unique_ptr<PyRetrieval> Retrieve(py::iterable keys_obj, py::handle layers_obj,
                                        py::handle dest, const std::string& mode,
                                        std::optional<py::iterable> block_table,
                                        double compute_seconds_per_layer) {
    LayerwiseRequest req = NewRequest(keys_obj, layers_obj, mode, compute_seconds_per_layer);
    SliceMap map = MapSlices(dest, req.keys.size(), model_.layout,
                             req.layers.last - req.layers.first, block_table, /*writable=*/true);
    // The addresses stay valid as long as the Retrieval holds their owners.
    std::shared_ptr<const SliceAddresses> addresses = map.at;
    const LayerRange range = req.layers;
    const uint32_t first = range.first;
    req.destination = [addresses, first](uint32_t layer, size_t chunk) {
      return addresses->At(layer - first, chunk);
    };
    Result<std::unique_ptr<LayerwiseRetrieval>> r =
        Released([&] { return client_->RetrieveLayerwise(std::move(req)); });
    return std::make_unique<PyRetrieval>(Take(r), std::move(map), range);
  }

  void Store(py::handle key_obj, py::handle kv) {
    const ChunkKey key = ToKey(key_obj);
    Region r = ToRegion(kv, model_.layout, /*writable=*/false, "kv");
    if (r.bytes != model_.layout.ChunkKvBytes()) {
      throw py::value_error("kv is " + std::to_string(r.bytes) + " bytes; a chunk of " +
                            model_.layout.ToString() + " is " +
                            std::to_string(model_.layout.ChunkKvBytes()));
    }
    Result<std::string> object = Released([&] {
      return EncodeChunkObject(model_.layout, key, {r.data, r.bytes});
    });
    std::string bytes = Take(object);
    py::gil_scoped_release release;
    client_->StoreAsync(key, std::move(bytes));
  }

  std::unique_ptr<PySave> StartSave(py::iterable keys_obj) {
    std::vector<ChunkKey> keys = ToKeys(keys_obj);
    if (keys.empty()) throw py::value_error("no keys to save");
    const size_t n = keys.size();
    Result<std::unique_ptr<LayerwiseSave>> save =
        Released([&] { return client_->StartSave(model_, std::move(keys)); });
    return std::make_unique<PySave>(Take(save), model_, n);
  }

  // The C++ client alone on a request, timed in C++ from the request to the retrieval's end,
  // destruction included, as Python's is (the baseline of `bench model`'s python_vs_cpp_ratio).
  // Into regions of its own, on a page boundary (core/page_buffer.h: a plain new[] puts a large
  // block 16 bytes past one, where the kernel's copy runs at half speed) and kept from one call
  // to the next, as an engine's tensors are (memory written for the first time costs more on
  // some virtual machines: docs/decisions.md).
  double CppRetrievalSeconds(py::iterable keys_obj, py::handle layers_obj,
                             const std::string& mode) {
    LayerwiseRequest req = NewRequest(keys_obj, layers_obj, mode);
    const uint64_t bytes = req.keys.size() * model_.layout.LayerSliceBytes();
    const size_t layers = req.layers.last - req.layers.first;
    Status s;
    double seconds = 0;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(cpp_regions_mu_);  // taken without the GIL: no thread waits holding it
      if (cpp_regions_.size() != layers || (layers > 0 && cpp_regions_[0].size() != bytes)) {
        cpp_regions_.clear();
        for (size_t l = 0; l < layers; ++l) cpp_regions_.emplace_back(bytes);
      }
      for (PageBuffer& r : cpp_regions_) req.regions.push_back(r.bytes());
      const auto start = std::chrono::steady_clock::now();
      {
        Result<std::unique_ptr<LayerwiseRetrieval>> r = client_->RetrieveLayerwise(std::move(req));
        s = r ? (*r)->Wait() : r.error();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    Check(s);
    return seconds;
  }

  std::unique_ptr<PyDeviceRetrieval> RetrieveDevice(py::iterable keys_obj, py::handle layers_obj,
                                                    py::handle caches, py::iterable block_ids,
                                                    const std::string& order,
                                                    py::handle first_token, const std::string& mode,
                                                    py::object device, py::handle staging_layers,
                                                    double compute_seconds_per_layer) {
    LayerwiseRequest base = NewRequest(keys_obj, layers_obj, mode, compute_seconds_per_layer);
    DeviceCaches on = ReadDeviceCaches(caches, base.layers.last - base.layers.first, model_.layout,
                                       order, block_ids, first_token, device,
                                       /*writable=*/true);
    DeviceRetrievalRequest req{.model = model_,
                               .keys = std::move(base.keys),
                               .layers = base.layers,
                               .target = on.target,
                               .mode = base.mode,
                               .staging_layers = StagingLayers(staging_layers),
                               .compute_seconds_per_layer = base.compute_seconds_per_layer};
    Result<std::unique_ptr<DeviceRetrieval>> r =
        Released([&] { return RetrieveToDevice(*client_, std::move(req)); });
    return std::make_unique<PyDeviceRetrieval>(TakeArgument(r), std::move(on));
  }

  std::unique_ptr<PyDeviceSave> SaveDevice(py::iterable keys_obj, py::handle caches,
                                           py::iterable block_ids, const std::string& order,
                                           py::handle first_token, py::object device,
                                           py::handle staging_layers) {
    std::vector<ChunkKey> keys = ToKeys(keys_obj);
    if (keys.empty()) throw py::value_error("no keys to save");
    DeviceCaches on = ReadDeviceCaches(caches, model_.layout.num_layers, model_.layout, order,
                                       block_ids, first_token, device, /*writable=*/false);
    DeviceSaveRequest req{.model = model_,
                          .keys = std::move(keys),
                          .source = on.target,
                          .staging_layers = StagingLayers(staging_layers)};
    Result<std::unique_ptr<DeviceSave>> s =
        Released([&] { return SaveFromDevice(*client_, std::move(req)); });
    return std::make_unique<PyDeviceSave>(TakeArgument(s), std::move(on));
  }

  void Flush() {
    py::gil_scoped_release release;
    client_->Flush();
  }

  py::dict Stats() const {
    const ClientStats s = client_->Stats();
    py::dict d;
    d["stored"] = s.stored;
    d["dropped"] = s.dropped;
    d["failed"] = s.failed;
    d["dram_bytes"] = s.dram_bytes;
    d["retries"] = s.retries;
    return d;
  }

 private:
  ModelPreset model_;
  std::shared_ptr<Client> client_;
  std::mutex cpp_regions_mu_;
  std::vector<PageBuffer> cpp_regions_;  // CppRetrievalSeconds's, guarded by cpp_regions_mu_
};

ModelPreset MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                       const std::string& dtype, uint32_t tokens_per_chunk, const std::string& name,
                       bool latent) {
  ModelPreset m;
  if (name.empty() || name.size() > kMaxScopeText) {
    throw py::value_error("the model name is 1 to 4096 bytes");
  }
  m.name = name;
  m.layout.num_layers = layers;
  m.layout.num_kv_heads = kv_heads;
  m.layout.head_dim = head_dim;
  Result<KvDtype> d = ParseKvDtype(dtype);
  if (!d) throw py::value_error(d.error().message());
  m.layout.dtype = *d;
  m.layout.tokens_per_chunk = tokens_per_chunk;
  m.layout.kind = latent ? KvKind::kLatent : KvKind::kKeyValue;
  if (Status s = m.layout.Validate(); !s.ok()) throw py::value_error(s.message());
  return m;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "ObjectCache's C++ client, bound for Python engines (docs/python.md).";
  g_error_type = PyErr_NewExceptionWithDoc(
      "objectcache.Error",
      "An error of the cache: .code names the status (NotFound, DataLoss, Unavailable, ...) "
      "and .message says what happened.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_error_type);
  BindDevices(m);

  py::class_<ModelPreset>(m, "Layout", R"doc(
The shape of a model's KV cache and its chunking: what a chunk object holds.

Layout(layers, kv_heads, head_dim, dtype="bf16", tokens_per_chunk=16, name="custom",
       latent=False)

A layer slice of a chunk is tokens_per_chunk x 2 (K and V) x kv_heads x head_dim elements; a
latent layout (MLA: one latent vector per token per layer) has no factor 2: give kv_heads=1 and
head_dim = the latent width. `name` is the model's name, part of every key.)doc")
      .def(py::init(&MakeLayout), py::arg("layers"), py::arg("kv_heads"), py::arg("head_dim"),
           py::arg("dtype") = "bf16", py::arg("tokens_per_chunk") = 16, py::arg("name") = "custom",
           py::arg("latent") = false)
      .def_static(
          "preset", [](const std::string& name) { return OrValueError(FindModelPreset(name)); },
          py::arg("name"), "A named preset: llama-3.1-8b, llama-3.1-70b, ...")
      .def_static(
          "from_json", [](const std::string& text) { return OrValueError(ParseModelJson(text)); },
          py::arg("text"), "A layout in the JSON form of `objectcache --layout FILE`.")
      .def("to_json", &ModelToJson)
      .def_property_readonly("name", [](const ModelPreset& p) { return p.name; })
      .def_property_readonly("layers", [](const ModelPreset& p) { return p.layout.num_layers; })
      .def_property_readonly("kv_heads", [](const ModelPreset& p) { return p.layout.num_kv_heads; })
      .def_property_readonly("head_dim", [](const ModelPreset& p) { return p.layout.head_dim; })
      .def_property_readonly("dtype",
                             [](const ModelPreset& p) { return KvDtypeName(p.layout.dtype); })
      .def_property_readonly("tokens_per_chunk",
                             [](const ModelPreset& p) { return p.layout.tokens_per_chunk; })
      .def_property_readonly("latent",
                             [](const ModelPreset& p) { return p.layout.kind == KvKind::kLatent; })
      .def_property_readonly("layer_slice_bytes",
                             [](const ModelPreset& p) { return p.layout.LayerSliceBytes(); })
      .def_property_readonly("chunk_kv_bytes",
                             [](const ModelPreset& p) { return p.layout.ChunkKvBytes(); })
      .def_property_readonly(
          "chunk_object_bytes",
          [](const ModelPreset& p) { return ChunkGeometry(p.layout, ChunkKey()).ObjectBytes(); })
      .def_property_readonly("fingerprint",
                             [](const ModelPreset& p) { return p.layout.Fingerprint(); })
      .def("__eq__", [](const ModelPreset& a,
                        const ModelPreset& b) { return a.name == b.name && a.layout == b.layout; })
      .def("__repr__", [](const ModelPreset& p) {
        return "Layout(" + p.name + ": " + p.layout.ToString() + ")";
      });

  m.def(
      "chunk_keys",
      [](py::handle tokens, const ModelPreset& layout, std::optional<std::string> tenant,
         std::optional<std::string> adapter, std::optional<std::string> cache_salt) {
        const std::vector<uint32_t> ids = ToTokens(tokens);
        const std::string t = ScopeText(tenant, "tenant"), a = ScopeText(adapter, "adapter"),
                          c = ScopeText(cache_salt, "cache_salt");
        const KeyNamespace ns(layout.name, layout.layout,
                              KeyScope{.tenant_salt = t, .adapter = a, .cache_salt = c});
        return KeyList(ns.KeysForTokens(ids));
      },
      py::arg("tokens"), py::arg("layout"), py::arg("tenant") = py::none(),
      py::arg("adapter") = py::none(), py::arg("cache_salt") = py::none(),
      R"doc(The 16-byte keys of every full chunk of `tokens` (docs/keys.md): the same keys as
`objectcache kv keys`. The tenant salt, LoRA adapter and request cache salt are part of the
namespace, so two of them never share a chunk.)doc");

  m.def(
      "encode_chunk",
      [](const ModelPreset& layout, py::handle key, py::handle kv) {
        const ChunkKey k = ToKey(key);
        Region r = ToRegion(kv, layout.layout, false, "kv");
        Result<std::string> object = EncodeChunkObject(layout.layout, k, {r.data, r.bytes});
        return py::bytes(Take(object));
      },
      py::arg("layout"), py::arg("key"), py::arg("kv"),
      "The chunk object (docs/object-format.md) of one chunk's layer-major KV.");

  py::class_<PyRetrieval>(m, "Retrieval",
                          "A layerwise retrieval in flight; its destinations are filled in place.")
      .def_property_readonly("hits", &PyRetrieval::Hits,
                             "How many leading keys are delivered (blocks until known).")
      .def("wait_for_layer", &PyRetrieval::WaitForLayer, py::arg("layer"),
           "Blocks until `layer` is in its destination and verified; raises Error if it never "
           "will be.")
      .def("wait", &PyRetrieval::Wait, "Blocks until every layer is in; raises on failure.");

  py::class_<PySave>(m, "Save", "A prefill's new chunks, saved layer by layer.")
      .def("save_layer", &PySave::SaveLayer, py::arg("layer"), py::arg("source"),
           py::arg("block_ids") = py::none(),
           R"doc(Hands over layer `layer`'s KV of every chunk of the save: one tensor holding the
chunks' slices back to back, or a paged cache [num_blocks, ...] with `block_ids` naming each
chunk's block. Copies and returns; sealing and storing happen off this thread.)doc")
      .def_property_readonly("dropped", &PySave::dropped,
                             "True when the write-behind queue had no room for this save.");

  py::class_<PyClient>(m, "Client", R"doc(
A client of `objectcache serve` (or of any S3 server, for the plain modes).

Client(endpoints, bucket, layout, access_key=None, secret_key=None, dram_tier_bytes=0,
       ca_file=None, timeout=60, retries=3, write_behind_bytes=256 MiB, parallel_requests=8,
       aggregated_streams=0, failover=False)

failover=True: every endpoint serves the same store (gateways over one Ceph pool); a request
that fails for transport reasons is retried at the next endpoint.)doc")
      .def(py::init<std::vector<std::string>, std::string, ModelPreset, std::optional<std::string>,
                    std::optional<std::string>, py::handle, std::optional<std::string>, double,
                    py::handle, py::handle, py::handle, py::handle, bool>(),
           py::arg("endpoints"), py::arg("bucket"), py::arg("layout"),
           py::arg("access_key") = py::none(), py::arg("secret_key") = py::none(),
           py::arg("dram_tier_bytes") = 0, py::arg("ca_file") = py::none(),
           py::arg("timeout") = 60.0, py::arg("retries") = 3,
           py::arg("write_behind_bytes") = uint64_t{256} << 20, py::arg("parallel_requests") = 8,
           py::arg("aggregated_streams") = 0, py::arg("failover") = false)
      .def_property_readonly("layout", &PyClient::model)
      .def("lookup", &PyClient::Lookup, py::arg("keys"), "How many leading keys are cached.")
      .def("pin", &PyClient::Pin, py::arg("keys"), py::arg("ttl_seconds"),
           "Keeps the chunks from eviction for the TTL; returns the keys that are not cached.")
      .def("retrieve_layerwise", &PyClient::Retrieve, py::keep_alive<0, 1>(), py::arg("keys"),
           py::arg("layers"), py::arg("dest"), py::arg("mode") = "S3Agg-LW",
           py::arg("block_table") = py::none(), py::arg("compute_seconds_per_layer") = 0.0,
           R"doc(Starts retrieving the cached prefix of `keys` into `dest` and returns at once.
`layers` is a count (layers 0..n-1) or a (first, last) pair; `dest` has one tensor or buffer per
layer of the range, holding the chunks' slices back to back, or, with `block_table`, a paged
cache [num_blocks, 2, block_size, kv_heads, head_dim] whose block block_table[j] receives chunk
j. `mode` is S3Agg-LW (default), S3Agg-CW, S3-LW or S3-CW.)doc")
      .def("store", &PyClient::Store, py::arg("key"), py::arg("kv"),
           "Queues one chunk's layer-major KV to be stored, write-behind (never blocks).")
      .def("start_save", &PyClient::StartSave, py::keep_alive<0, 1>(), py::arg("keys"),
           "Starts saving the chunks `keys` layer by layer (Save.save_layer).")
      .def("_cpp_retrieval_seconds", &PyClient::CppRetrievalSeconds, py::arg("keys"),
           py::arg("layers"), py::arg("mode") = "S3Agg-LW",
           "Benchmarks only: the same retrieval by the C++ client into its own memory, timed "
           "in C++.")
      .def("retrieve_to_device", &PyClient::RetrieveDevice, py::keep_alive<0, 1>(), py::arg("keys"),
           py::arg("layers"), py::arg("caches"), py::arg("block_ids"), py::arg("order") = "2BNHD",
           py::arg("first_token") = 0, py::arg("mode") = "S3Agg-LW", py::arg("device") = py::none(),
           py::arg("staging_layers") = 4, py::arg("compute_seconds_per_layer") = 0.0,
           R"doc(Starts retrieving the cached prefix of `keys` into paged KV caches in GPU memory
and returns at once (docs/gpu.md). `caches` has one CUDA tensor per layer of `layers`, its
dimensions named by `order`: "2BNHD" (vLLM FLASH_ATTN), "B2NHD" (FlashInfer), "B2HND", "BNC" or
"B1NC" (MLA); any strides, the head dimension contiguous. Token i of the prefix goes to block
block_ids[(first_token + i) // block_size]. Each layer is verified in pinned staging
(staging_layers layers of it) before it is copied to the GPU. `device`: an objectcache.Device
(the emulated one in tests); None, the tensors' GPU.)doc")
      .def("save_from_device", &PyClient::SaveDevice, py::keep_alive<0, 1>(), py::arg("keys"),
           py::arg("caches"), py::arg("block_ids"), py::arg("order") = "2BNHD",
           py::arg("first_token") = 0, py::arg("device") = py::none(),
           py::arg("staging_layers") = 4,
           "Starts saving the chunks `keys` from paged KV caches in GPU memory (one CUDA tensor "
           "per layer of the model): DeviceSave.save_layer after each layer's forward.")
      .def("flush", &PyClient::Flush, "Blocks until every chunk queued so far is stored.")
      .def("stats", &PyClient::Stats,
           "{stored, dropped, failed, dram_bytes, retries}: the write-behind queue's counts and "
           "the requests retried.");
}
