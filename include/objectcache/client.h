// The ObjectCache client: lookup and layerwise retrieval against `objectcache serve`.
//
// A Client holds the endpoints, credentials and a pool of keep-alive connections; it is
// thread-safe. RetrieveLayerwise starts an aggregated layerwise retrieval (docs/wire-format.md)
// and returns at once; the returned LayerwiseRetrieval tells, layer by layer, when the bytes
// are in the caller's memory and verified: WaitForLayer(l) blocks until layer l is ready (OK)
// or can never be (the error), and an optional callback reports each layer as it completes.
// A layer is never reported ready with bytes that failed their check.
//
// Status: the first part of the client library (issue 4): lookup, aggregated layerwise
// retrieval and the write-behind store; chunkwise and plain-S3 modes, the DRAM tier and retries
// are still to come.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/layer_reader.h"
#include "objectcache/status.h"

namespace objectcache {

struct ClientStats {
  uint64_t stored = 0;   // chunks stored by the write-behind queue
  uint64_t dropped = 0;  // chunks dropped because the queue was full
  uint64_t failed = 0;   // chunks whose batch the server refused or could not take
};

struct ClientOptions {
  // Server URLs ("http://HOST:PORT"); a retrieval goes to one of them, chosen by its first key.
  std::vector<std::string> endpoints = {"http://127.0.0.1:9000"};
  std::string bucket;
  // Both empty: OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, else AWS_ACCESS_KEY_ID /
  // AWS_SECRET_ACCESS_KEY, else unsigned requests (for servers in anonymous mode).
  std::string access_key, secret_key;
  std::chrono::seconds timeout{60};
  // Write-behind queue: at most this many bytes wait to be stored; beyond, chunks are dropped.
  size_t write_behind_bytes = 256 << 20;
};

// Called once per layer, in layer order, from the retrieval's own thread: OK when the layer is
// in its region and verified; the error otherwise (then no later layer follows).
using LayerReadyFn = std::function<void(uint32_t layer, const Status& status)>;

enum class RetrievalMode {
  // One request; the server aggregates every chunk's slice of a layer (docs/wire-format.md).
  kAggregatedLayerwise,
  // Plain S3, any server: each chunk's header once, then one ranged GET per chunk per layer
  // (what LMCache and NIXL do against object stores today). The baseline of aggregation.
  kPlainLayerwise,
};

struct LayerwiseRequest {
  ModelPreset model;           // the layout the chunks were stored with
  std::vector<ChunkKey> keys;  // the prefix, in order
  LayerRange layers;           // [first, last)
  // One region per layer of the range, each at least keys.size() x LayerSliceBytes: layer
  // first + i lands in regions[i], chunk j's slice at j x LayerSliceBytes. Must outlive the
  // retrieval.
  std::vector<std::span<std::byte>> regions;
  LayerReadyFn on_layer;  // optional
  RetrievalMode mode = RetrievalMode::kAggregatedLayerwise;
};

// One retrieval in flight. Thread-safe; its destructor waits for the retrieval to end.
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

class Client {
 public:
  virtual ~Client() = default;
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // How many leading keys are cached (one request).
  virtual Result<size_t> Lookup(std::span<const ChunkKey> keys) = 0;

  // Starts a layerwise retrieval; returns at once. InvalidArgument for a malformed request.
  virtual Result<std::unique_ptr<LayerwiseRetrieval>> RetrieveLayerwise(
      LayerwiseRequest request) = 0;

  // Queues a chunk object (EncodeChunkObject) to be stored under its key, write-behind: never
  // blocks. A full queue drops the chunk (counted in Stats; a cache can always recompute).
  // Queued chunks go to the server in batch-store requests from a background thread.
  virtual void StoreAsync(const ChunkKey& key, std::string chunk_object) = 0;
  // Blocks until every chunk queued so far is stored or has failed.
  virtual void Flush() = 0;
  virtual ClientStats Stats() const = 0;
};

}  // namespace objectcache
