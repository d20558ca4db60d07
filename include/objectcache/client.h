// The ObjectCache client: lookup, retrieval and write-behind store against `objectcache serve`
// (aggregated modes) or any S3 server (plain modes).
//
// A Client holds the endpoints, credentials, a pool of keep-alive connections and an optional
// DRAM tier; it is thread-safe. RetrieveLayerwise starts a retrieval in one of four modes and
// returns at once; the returned LayerwiseRetrieval tells, layer by layer, when the bytes are in
// the caller's memory and verified: WaitForLayer(l) blocks until layer l is ready (OK) or can
// never be (the error), and an optional callback reports each layer as it completes. A layer
// is never reported ready with bytes that failed their check.
//
// Keys are spread over the endpoints by their bytes (docs/wire-format.md, "Several
// endpoints"): every client of the same endpoint list sends a key to the same server. Reads
// and stores are retried on transport failures; an aggregated retrieval resumes at its first
// layer not yet delivered.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/layer_reader.h"
#include "objectcache/status.h"

namespace objectcache {

struct ClientStats {
  uint64_t stored = 0;      // chunks stored by the write-behind queue
  uint64_t dropped = 0;     // chunks dropped because the queue was full
  uint64_t failed = 0;      // chunks whose batch the server refused or could not take
  uint64_t dram_bytes = 0;  // bytes held by the DRAM tier
  uint64_t retries = 0;     // requests sent again after a transport failure
};

struct ClientOptions {
  // Server URLs ("http://HOST:PORT" or "https://HOST:PORT"); keys are spread over them.
  std::vector<std::string> endpoints = {"http://127.0.0.1:9000"};
  // HTTPS endpoints are verified against this PEM bundle of CA certificates (empty: the
  // system's trusted CAs).
  std::string ca_file;
  std::string bucket;
  // Both empty: OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, else AWS_ACCESS_KEY_ID /
  // AWS_SECRET_ACCESS_KEY, else unsigned requests (for servers in anonymous mode).
  std::string access_key, secret_key;
  // Per request: connecting, sending, the response header, and each wait for body bytes; a
  // server silent for this long fails the request (Unavailable, so it is retried).
  std::chrono::seconds timeout{60};
  // Transport failures (refused, reset, timed out, 5xx) are retried this many times.
  int retries = 3;
  // Every endpoint serves the same store (gateways over one Ceph pool, docs/ceph.md): keys are
  // still spread over them, but a request that fails for transport reasons is retried at the
  // next endpoint, so a dead gateway costs a retry, not the request. Leave it off for servers
  // with stores of their own: another server would answer a miss.
  bool failover = false;
  // Concurrent requests of the plain modes (one GET per chunk or per chunk per layer).
  int parallel_requests = 8;
  // Concurrent aggregated requests per endpoint, each for a contiguous stripe of the keys
  // (more streams spread the work over more server workers and client threads, past what one
  // TCP connection carries; on a 2-core machine one is fastest: measured with `bench ttft`).
  // 0: one per 4 cores of this machine, 1 to 8 (docs/gpu.md).
  int aggregated_streams = 0;
  // Idle keep-alive connections kept per endpoint for later requests. A request takes one (an
  // aggregated retrieval one per stream, the plain modes up to parallel_requests at once) and
  // gives it back; past this many idle, it is closed. Keep it at least the retrievals in
  // flight at once, or each one past it opens (over TLS, handshakes) a connection of its own.
  size_t max_idle_connections = 64;
  // The layerwise wire format asked for (docs/wire-format.md): 2, the writers' checksums
  // verified here (the server hashes nothing), or 1, the server's frame checksums.
  int wire_version = 2;
  // Write-behind queue: at most this many bytes wait to be stored; beyond, chunks are dropped.
  size_t write_behind_bytes = 256 << 20;
  // DRAM tier: at most this many bytes of chunk objects in this process (0: none). It holds
  // what this client stores and, when fill_dram_on_retrieve, what full-range retrievals bring.
  // A retrieval's leading DRAM hits are copied layer by layer without the network.
  uint64_t dram_tier_bytes = 0;
  bool fill_dram_on_retrieve = true;
};

// Called once per layer, in layer order, from one of the retrieval's threads: OK when the layer
// is in its region and verified; the error otherwise (then no later layer follows).
using LayerReadyFn = std::function<void(uint32_t layer, const Status& status)>;

enum class RetrievalMode {
  // S3Agg-LW: one request per endpoint; the server aggregates every chunk's slice of a layer
  // into one frame (docs/wire-format.md); each layer is handed over as soon as it is in.
  kAggregatedLayerwise,
  // S3Agg-CW: the same aggregated response, handed over only once all of it is in (an engine
  // that loads the whole prefix before it starts prefill).
  kAggregatedChunkwise,
  // S3-LW: plain S3, any server: each chunk's header once, then one ranged GET per chunk per
  // layer (what LMCache and NIXL do against object stores today), layers handed over in turn.
  kPlainLayerwise,
  // S3-CW: plain S3, any server: one GET per whole chunk object, handed over once all are in.
  kPlainChunkwise,
};

// "S3Agg-LW", "S3Agg-CW", "S3-LW", "S3-CW".
const char* RetrievalModeName(RetrievalMode mode);
// The mode of one of those names; InvalidArgument for any other.
Result<RetrievalMode> ParseRetrievalMode(std::string_view name);

// Where chunk j's slice of layer l goes: the first of LayerSliceBytes writable bytes. Lets a
// retrieval fill an engine's paged KV blocks wherever they are (a BlockTable's blocks,
// include/objectcache/kv_pool.h). Called from the retrieval's threads.
using SliceDestinationFn = std::function<std::byte*(uint32_t layer, size_t chunk)>;

struct LayerwiseRequest {
  ModelPreset model;           // the layout the chunks were stored with
  std::vector<ChunkKey> keys;  // the prefix, in order
  LayerRange layers;           // [first, last)
  // One region per layer of the range, each at least keys.size() x LayerSliceBytes: layer
  // first + i lands in regions[i], chunk j's slice at j x LayerSliceBytes. Must outlive the
  // retrieval. Leave empty when `destination` is given. Start them on a page boundary or at
  // least 32 bytes past one, as torch and cudaHostAlloc do: on AMD EPYC the kernel copies into
  // memory 1-31 bytes past a page boundary (where malloc puts a large block) at half speed
  // (docs/decisions.md).
  std::vector<std::span<std::byte>> regions;
  LayerReadyFn on_layer;  // optional
  RetrievalMode mode = RetrievalMode::kAggregatedLayerwise;
  // Instead of regions: each slice's own place. The memory must outlive the retrieval.
  SliceDestinationFn destination;
  // Whether the bytes stay where `destination` put them once their layer is reported (false for
  // a staging ring the caller reuses): only then may the DRAM tier be filled from them.
  bool destination_keeps_bytes = true;
  // The engine's compute time per layer for this prompt (0: not said). A server sharing a
  // bandwidth cap compute-aware gives the retrieval the rate that keeps pace with it
  // (docs/scheduler.md).
  double compute_seconds_per_layer = 0;
};

// One retrieval in flight. Thread-safe; its destructor waits for the retrieval to end. It must
// be destroyed before the Client that started it.
class LayerwiseRetrieval {
 public:
  virtual ~LayerwiseRetrieval() = default;
  // How many leading keys are being delivered (the cached prefix); blocks until known.
  virtual Result<uint32_t> Hits() = 0;
  // Blocks until layer `layer` is ready (OK) or never will be (its error). InvalidArgument
  // for a layer outside the request.
  virtual Status WaitForLayer(uint32_t layer) = 0;
  // Blocks until the retrieval ends: OK only if every layer arrived verified.
  virtual Status Wait() = 0;
};

// Where chunk j's slice of the layer being saved comes from: the first of LayerSliceBytes
// readable bytes (an engine's paged KV block, or its place in a contiguous layer).
using SliceSourceFn = std::function<const std::byte*(size_t chunk)>;

// A prefill's new chunks, saved layer by layer as the engine computes them (Client::StartSave).
// The engine hands over each layer once; each layer is copied into the chunk objects on the
// caller's thread (one memcpy per slice, nothing else), and once the last layer is in, the
// client's write-behind thread seals the objects (checksums, header) and stores them in
// batch-store requests. Not thread-safe: one engine thread calls it. It may outlive nothing: it
// must be destroyed before the Client; destroying it before every layer is in drops its chunks.
class LayerwiseSave {
 public:
  virtual ~LayerwiseSave() = default;
  // Copies layer `layer`'s slice of every chunk from source(chunk). InvalidArgument for a layer
  // outside the layout or one already given. A dropped save copies nothing and returns OK.
  virtual Status SaveLayer(uint32_t layer, const SliceSourceFn& source) = 0;
  // True when the write-behind queue had no room for this save's chunks (counted in
  // ClientStats::dropped): saving never blocks the engine, a cache can always recompute.
  virtual bool dropped() const = 0;
};

class Client {
 public:
  virtual ~Client() = default;
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // How many leading keys are cached (one request).
  virtual Result<size_t> Lookup(std::span<const ChunkKey> keys) = 0;

  // Keeps the chunks from eviction for `ttl` (explicit caching of a system prompt or a document
  // many requests share; pins count against the tenant's quota). Returns the keys that are
  // not cached, which nothing pinned.
  virtual Result<std::vector<ChunkKey>> Pin(std::span<const ChunkKey> keys,
                                            std::chrono::seconds ttl) = 0;

  // Starts a layerwise retrieval; returns at once. InvalidArgument for a malformed request.
  virtual Result<std::unique_ptr<LayerwiseRetrieval>> RetrieveLayerwise(
      LayerwiseRequest request) = 0;

  // Queues a chunk object (EncodeChunkObject) to be stored under its key, write-behind: never
  // blocks. A full queue drops the chunk (counted in Stats; a cache can always recompute).
  // Queued chunks go to the server in batch-store requests from a background thread.
  virtual void StoreAsync(const ChunkKey& key, std::string chunk_object) = 0;
  // Starts saving the chunks `keys` of `model`'s layout, layer by layer (LayerwiseSave). Their
  // objects' bytes count against write_behind_bytes from now until they are stored; when they
  // do not fit the save is dropped. InvalidArgument for an invalid layout or no keys.
  virtual Result<std::unique_ptr<LayerwiseSave>> StartSave(const ModelPreset& model,
                                                           std::vector<ChunkKey> keys) = 0;
  // Blocks until every chunk queued so far is stored or has failed.
  virtual void Flush() = 0;
  virtual ClientStats Stats() const = 0;
};

}  // namespace objectcache
