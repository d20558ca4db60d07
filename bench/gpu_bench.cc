// `objectcache bench gpu`: KV straight into and out of device memory (docs/gpu.md). A prefix
// stored on a local server is retrieved into a paged KV cache in vLLM's FLASH_ATTN layout on the
// device, copied back and checked byte for byte (every block outside the request untouched);
// an emulated prefill consumes it layer by layer from the device (TTFT against the KV already
// resident); the scatter of one layer into its blocks is timed against one plain host-to-device
// copy of the same bytes, interleaved; new chunks are saved from the device's blocks and read back
// through the host path. Runs on a GPU (--device cuda:0) or the emulated device.
#include <xxhash.h>

#include <cstring>
#include <iostream>
#include <numeric>
#include <random>

#include "bench/bench_command.h"
#include "bench/kv_fixture.h"
#include "core/seeded_data.h"
#include "engine/prefill.h"
#include "objectcache/chunk_object.h"
#include "objectcache/device_kv.h"

namespace objectcache::bench {
namespace {

constexpr std::byte kSentinel{0xA5};

struct GpuFlags {
  std::string device = "cuda:0";
  std::string layout = "llama-3.1-8b";
  size_t tokens = 16384;
  uint32_t block_size = 16;
  uint32_t staging_layers = 4;
  int streams = 0;  // the client's aggregated_streams (0: by cores)
  int repeats = 3;
  std::string dir;
  std::string json;
};

// A FLASH_ATTN cache (2, blocks, block_size, heads, dim) per layer on the device.
struct DeviceCache {
  std::shared_ptr<device::Device> device;
  PagedKvLayout paged;
  std::vector<device::DevicePtr> layers;
  ~DeviceCache() {
    for (device::DevicePtr p : layers) device->Free(p);
  }
};

// Pinned host memory of the device.
struct Pinned {
  Pinned(std::shared_ptr<device::Device> d, uint64_t n) : device(std::move(d)), bytes(n) {}
  ~Pinned() {
    if (p) device->FreePinned(p);
  }
  Status Allocate() {
    OC_ASSIGN_OR_RETURN(p, device->AllocatePinned(bytes));
    return Status();
  }
  std::shared_ptr<device::Device> device;
  uint64_t bytes;
  std::byte* p = nullptr;
};

// Every layer of the cache set to the sentinel.
Status Fill(const DeviceCache& cache, Pinned& host, device::Stream& stream) {
  std::memset(host.p, static_cast<int>(kSentinel), cache.paged.layer_bytes);
  for (device::DevicePtr l : cache.layers) {
    OC_RETURN_IF_ERROR(cache.device->CopyToDevice(stream, l, host.p, cache.paged.layer_bytes));
  }
  return cache.device->Synchronize(stream);
}

// Copies each layer back and checks it: chunk c's vectors where FLASH_ATTN's indexing puts them
// for blocks[c] hold what was stored (by the slice's XXH3-64), every other block is the
// sentinel. Returns the bytes checked.
Result<uint64_t> CheckCache(const DeviceCache& cache, const PrefixSet& prefix,
                            const std::vector<uint32_t>& blocks, Pinned& host,
                            device::Stream& stream) {
  const KvLayout& kv = prefix.model.layout;
  const uint64_t vec = uint64_t{kv.head_dim} * KvDtypeBytes(kv.dtype), h = kv.num_kv_heads;
  const uint64_t n = cache.paged.block_size, nb = cache.paged.num_blocks;
  const uint64_t block_bytes = n * h * vec;
  std::vector<bool> used(nb, false);
  for (uint32_t b : blocks) used[b] = true;
  const std::vector<std::byte> sentinel(block_bytes, kSentinel);
  std::vector<std::byte> slice(kv.LayerSliceBytes());
  uint64_t checked = 0;
  for (uint32_t l = 0; l < kv.num_layers; ++l) {
    OC_RETURN_IF_ERROR(
        cache.device->CopyToHost(stream, host.p, cache.layers[l], cache.paged.layer_bytes));
    OC_RETURN_IF_ERROR(cache.device->Synchronize(stream));
    for (size_t c = 0; c < blocks.size(); ++c) {
      std::byte* out = slice.data();
      for (uint64_t kind = 0; kind < 2; ++kind) {
        for (uint64_t t = 0; t < kv.tokens_per_chunk; ++t) {
          const std::byte* at = host.p + ((kind * nb + blocks[c]) * n + t) * h * vec;
          std::memcpy(out, at, h * vec);
          out += h * vec;
        }
      }
      if (LayerChecksum(slice) != prefix.checksums[c * kv.num_layers + l]) {
        return DataLossError("layer " + std::to_string(l) + " of chunk " + std::to_string(c) +
                             " differs on the device from what was stored");
      }
    }
    for (uint64_t b = 0; b < nb; ++b) {
      for (uint64_t kind = 0; kind < 2 && !used[b]; ++kind) {
        if (std::memcmp(host.p + (kind * nb + b) * block_bytes, sentinel.data(), block_bytes)) {
          return DataLossError("block " + std::to_string(b) + " of layer " + std::to_string(l) +
                               ", outside the request, was written");
        }
      }
    }
    checked += cache.paged.layer_bytes;
  }
  return checked;
}

Status RunGpu(const GpuFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset(f.layout));
  const KvLayout& kv = model.layout;
  if (kv.kind != KvKind::kKeyValue) return InvalidArgumentError("bench gpu takes a K/V layout");
  if (f.block_size != kv.tokens_per_chunk) {
    return InvalidArgumentError("bench gpu keeps a chunk a block (--block-size 16)");
  }
  const size_t chunks = f.tokens / kv.tokens_per_chunk;
  if (chunks == 0 || f.repeats < 1) return InvalidArgumentError("--tokens >= 16, --repeats >= 1");
  OC_ASSIGN_OR_RETURN(std::shared_ptr<device::Device> dev, device::OpenDevice(f.device));
  OC_ASSIGN_OR_RETURN(ScratchRoot root, ScratchRoot::Make(f.dir, "objectcache-bench-gpu"));
  OC_ASSIGN_OR_RETURN(ServerChild server, StartServer(root.path(), true));
  OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "kvgpu", model));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Create({.endpoints = {server.endpoint},
                                      .bucket = "kvgpu",
                                      .aggregated_streams = f.streams,
                                      .write_behind_bytes = uint64_t{64} << 30}));
  std::cerr << "bench gpu: storing " << chunks << " chunks (" << f.tokens << " tokens of "
            << model.name << ") on " << dev->name() << "\n";
  OC_ASSIGN_OR_RETURN(PrefixSet prefix, StorePrefix(model, chunks, 7, client.get()));

  // The cache: the request's blocks shuffled among 64 more than it needs.
  DeviceCache cache{.device = dev,
                    .paged = PagedKvLayout::FlashAttn(kv, chunks + 64, f.block_size)};
  for (uint32_t l = 0; l < kv.num_layers; ++l) {
    OC_ASSIGN_OR_RETURN(device::DevicePtr p, dev->Allocate(cache.paged.layer_bytes));
    cache.layers.push_back(p);
  }
  std::vector<uint32_t> all(cache.paged.num_blocks);
  std::iota(all.begin(), all.end(), 0u);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(3));
  const std::vector<uint32_t> blocks(all.begin(), all.begin() + static_cast<long>(chunks));
  Pinned host(dev, cache.paged.layer_bytes);
  OC_RETURN_IF_ERROR(host.Allocate());
  OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, dev->NewStream());

  // The whole prefix into the cache's blocks, every layer.
  auto retrieve = [&] {
    DeviceRetrievalRequest req{
        .model = model,
        .keys = prefix.keys,
        .layers = {0, kv.num_layers},
        .target = {
            .device = dev, .paged = cache.paged, .layer_bases = cache.layers, .block_ids = blocks}};
    req.staging_layers = f.staging_layers;
    return RetrieveToDevice(*client, std::move(req));
  };

  // Retrievals into the device, each from a cache set to the sentinel; the last one checked.
  std::vector<double> seconds, calls_per_layer;
  uint64_t staging = 0, checked = 0;
  for (int r = 0; r < f.repeats; ++r) {
    OC_RETURN_IF_ERROR(Fill(cache, host, *stream));
    const double t0 = NowSeconds();
    OC_ASSIGN_OR_RETURN(std::unique_ptr<DeviceRetrieval> retrieval, retrieve());
    OC_RETURN_IF_ERROR(retrieval->Wait());
    seconds.push_back(NowSeconds() - t0);
    OC_ASSIGN_OR_RETURN(uint32_t hits, retrieval->Hits());
    if (hits != chunks) return DataLossError("only " + std::to_string(hits) + " chunks hit");
    const DeviceTransferStats st = retrieval->Stats();
    staging = st.staging_bytes;
    calls_per_layer.push_back(static_cast<double>(st.driver_calls) / kv.num_layers);
    if (r == f.repeats - 1) {
      OC_ASSIGN_OR_RETURN(checked, CheckCache(cache, prefix, blocks, host, *stream));
    }
  }
  const uint64_t kv_bytes = chunks * kv.ChunkKvBytes();

  // The emulated prefill of as many new tokens as are cached, on an H200 profile: each layer
  // computed once its KV is in the device's blocks, against the same prefill with its KV
  // resident there already; interleaved.
  OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(model.name));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile gpu, engine::FindGpuProfile("h200"));
  const engine::PrefillPlan plan{.model = compute,
                                 .gpu = gpu,
                                 .cached_tokens = chunks * kv.tokens_per_chunk,
                                 .new_tokens = chunks * kv.tokens_per_chunk};
  std::vector<double> ttft_device, ttft_resident;
  for (int r = 0; r < f.repeats; ++r) {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<DeviceRetrieval> retrieval, retrieve());
    const engine::PrefillResult loaded =
        engine::RunPrefill(plan, [&](uint32_t layer) { return retrieval->WaitForLayer(layer); });
    OC_RETURN_IF_ERROR(loaded.status);
    ttft_device.push_back(loaded.ttft_seconds);
    ttft_resident.push_back(
        engine::RunPrefill(plan, [](uint32_t) { return Status(); }).ttft_seconds);
  }

  // The cache's chunks saved from its blocks under new keys, and read back through the host
  // path: every slice what was stored.
  const std::vector<ChunkKey> save_keys =
      KeyNamespace(model.name, kv).KeysForTokens(SeededTokens(chunks * kv.tokens_per_chunk, 8));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> engine, dev->NewStream());
  const double s0 = NowSeconds();
  OC_ASSIGN_OR_RETURN(std::unique_ptr<DeviceSave> save,
                      SaveFromDevice(*client, {.model = model,
                                               .keys = save_keys,
                                               .source = {.device = dev,
                                                          .paged = cache.paged,
                                                          .layer_bases = cache.layers,
                                                          .block_ids = blocks},
                                               .staging_layers = f.staging_layers}));
  if (save->dropped()) return ResourceExhaustedError("the save did not fit the write-behind queue");
  for (uint32_t l = 0; l < kv.num_layers; ++l) OC_RETURN_IF_ERROR(save->SaveLayer(l, *engine));
  OC_RETURN_IF_ERROR(save->Wait());
  const double save_seconds = NowSeconds() - s0;
  client->Flush();
  if (client->Stats().failed > 0) return DataLossError("saved chunks were refused");
  prefix.keys = save_keys;
  OC_ASSIGN_OR_RETURN(
      std::unique_ptr<LayerwiseRetrieval> back,
      prefix.StartRetrieval(client.get(), RetrievalMode::kAggregatedLayerwise, chunks));
  OC_RETURN_IF_ERROR(back->Wait());
  const Status saved = prefix.CheckRetrieved(*back, chunks);

  // One layer's scatter into its blocks against one copy of the same bytes, interleaved (they
  // overwrite layers 0 and 1 of the cache).
  OC_ASSIGN_OR_RETURN(PagedSegments segments, PagedKvSegments(kv, cache.paged, blocks, 0, chunks));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<device::SegmentTable> table,
                      dev->UploadSegments(segments.segments));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, dev->NewEvent());
  const uint64_t layer_bytes = chunks * kv.LayerSliceBytes();
  std::vector<double> scatter, copy;
  for (int r = 0; r < 5 * f.repeats; ++r) {
    for (bool scatter_turn : {r % 2 == 0, r % 2 != 0}) {
      const double t0 = NowSeconds();
      OC_RETURN_IF_ERROR(
          scatter_turn
              ? dev->Scatter(*stream, cache.layers[0], host.p, layer_bytes, *table, table->size())
              : dev->CopyToDevice(*stream, cache.layers[1], host.p, layer_bytes));
      OC_RETURN_IF_ERROR(dev->Record(*done, *stream));
      OC_RETURN_IF_ERROR(dev->Wait(*done));
      (scatter_turn ? scatter : copy).push_back(NowSeconds() - t0);
    }
  }

  Report report("gpu");
  report.Param("device", dev->name());
  report.Param("layout", model.name);
  report.Param("tokens", f.tokens);
  report.Param("block_size", f.block_size);
  report.Param("staging_layers", f.staging_layers);
  report.Param("streams", f.streams);
  report.Param("repeats", f.repeats);
  const double med = Median(seconds);
  report.Metric("retrieve_seconds", med, "s", "16-token chunks into FLASH_ATTN blocks, median");
  report.Metric("retrieve_gbps", kv_bytes * 8 / med / 1e9, "Gbit/s", "KV bytes / retrieval time");
  report.Metric("bytes_verified", static_cast<double>(checked), "bytes",
                "device memory copied back and checked (blocks outside untouched)");
  report.Metric("calls_per_layer", Median(calls_per_layer), "calls",
                "driver calls a layer: scatter, event, wait");
  report.Metric("staging_bytes", static_cast<double>(staging), "bytes", "pinned staging ring");
  report.Metric("scatter_gbps", layer_bytes * 8 / Median(scatter) / 1e9, "Gbit/s",
                "one layer into its blocks");
  report.Metric("copy_gbps", layer_bytes * 8 / Median(copy) / 1e9, "Gbit/s",
                "the same bytes, one host-to-device copy");
  report.Metric("scatter_vs_copy_ratio", Median(copy) / Median(scatter), "x", "goal >= 0.8");
  report.Metric("ttft_resident_s", Median(ttft_resident), "s",
                "emulated H200 prefill, KV already on the device");
  report.Metric("ttft_device_s", Median(ttft_device), "s",
                "the same, KV retrieved into the device layer by layer");
  report.Metric("ttft_added_pct", 100 * (Median(ttft_device) / Median(ttft_resident) - 1), "%", "");
  report.Metric("save_seconds", save_seconds, "s", "every layer off the device into objects");
  report.Metric("save_verified", saved.ok() ? 1 : 0, "", "saved chunks read back byte for byte");
  report.Print();
  OC_RETURN_IF_ERROR(report.WriteJson(f.json));
  return saved;
}

}  // namespace

void AddGpuBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<GpuFlags>();
  CLI::App* g = AddBench(
      bench, "gpu",
      "KV into and out of paged device memory: every byte checked, scatter vs one copy", f, RunGpu);
  g->add_option("--device", f->device, "cuda:N or emulated");
  g->add_option("--layout", f->layout, "Model preset");
  g->add_option("--tokens", f->tokens, "Prefix length in tokens");
  g->add_option("--block-size", f->block_size, "Tokens a block");
  g->add_option("--staging-layers", f->staging_layers, "Layers of pinned staging");
  g->add_option("--streams", f->streams, "Connections a retrieval uses (0: one per 4 cores, 1-8)")
      ->check(CLI::Range(0, 64));
  g->add_option("--repeats,--rounds", f->repeats, "Timed retrievals");
  AddScratchDir(g, &f->dir);
}

}  // namespace objectcache::bench
