// The network side of the client: the four ways to bring a cached prefix into the caller's
// memory (a slot per chunk per layer), over one or more endpoints, with retries of idempotent
// requests.
//
//   Aggregated      one POST ?layerwise per endpoint (docs/wire-format.md); each layer is
//                   reported as soon as every endpoint's frame of it is in and verified.
//   PlainLayerwise  any S3 server: each chunk's header, then one ranged GET per chunk per
//                   layer, `parallel` requests at a time; each slice checked against its header.
//   PlainChunkwise  any S3 server: one GET per whole chunk object, `parallel` at a time, each
//                   object checked whole as it streams; layers reported once all are in.
//
// Keys are spread over endpoints by EndpointFor (docs/wire-format.md, "Several endpoints").
// A transport failure (Unavailable: refused, reset, timed out, a 5xx) is retried up to
// `retries` times with backoff, at the same endpoint or, with `failover`, at the next one; an
// aggregated retrieval resumes at its first layer not yet delivered. Other errors are final.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/layer_reader.h"
#include "objectcache/status.h"
#include "s3/connection_pool.h"

namespace objectcache::client {

// What to fetch and where it goes.
struct FetchTarget {
  const ModelPreset* model = nullptr;
  std::span<const ChunkKey> keys;  // the prefix asked for, in order
  LayerRange layers;
  // The first byte of keys[j]'s slice of layer `layer` (LayerSliceBytes of room).
  std::function<std::byte*(uint32_t layer, uint64_t j)> slot;
  double compute_seconds_per_layer = 0;  // told to the server's scheduler when set
};

// Reported by a fetch: the hit count once, then each layer in order once verified in place.
struct FetchEvents {
  std::function<void(uint32_t hits)> hits;
  std::function<void(uint32_t layer)> layer_ready;
  // Optional: the fetch failed for good while other requests of it may still run (an aggregated
  // retrieval's stripes): no further layer will be ready. At most once, before the fetch ends.
  std::function<void(const Status&)> failed;
};

struct FetchOptions {
  int retries = 3;
  int parallel = 8;  // concurrent requests of the plain modes
  int streams =
      0;  // concurrent aggregated requests per endpoint, each for a stripe of keys (0: by cores)
  int wire_version = 2;  // of layerwise responses (docs/wire-format.md)
  // Every endpoint serves the same store (gateways over one Ceph pool): attempt i of a request
  // whose keys live at endpoint e goes to endpoint (e + i) mod the count.
  bool failover = false;
};

class Fetcher {
 public:
  Fetcher(s3::ConnectionPool* pool, std::string bucket, FetchOptions options)
      : pool_(pool), bucket_(std::move(bucket)), options_(options) {}

  // The endpoint that holds `key`: the key's bytes 8..15, big-endian, modulo the count.
  size_t EndpointFor(const ChunkKey& key) const;

  Status Aggregated(const FetchTarget& target, const FetchEvents& events) const;
  Status PlainLayerwise(const FetchTarget& target, const FetchEvents& events) const;
  Status PlainChunkwise(const FetchTarget& target, const FetchEvents& events) const;

  // How many leading keys are cached: one POST ?lookup per endpoint.
  Result<size_t> Lookup(std::span<const ChunkKey> keys) const;

  // Pins the chunks for `ttl` (one POST ?pin per endpoint); the keys not cached.
  Result<std::vector<ChunkKey>> Pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) const;

  // Stores (key hex, chunk object) records: one POST ?batch-store per endpoint.
  Status BatchStore(std::span<const std::pair<ChunkKey, const std::string*>> records) const;

  // Runs attempt(endpoint) until it succeeds, fails with anything but Unavailable, or the
  // retries are spent (sleeping 20 ms, 40 ms, ... between attempts; the first one at another
  // endpoint goes at once). The endpoint is `home`, or with failover the next ones in turn.
  Status WithRetries(size_t home, const std::function<Status(size_t endpoint)>& attempt) const;

  // Attempts retried after a transport failure, since construction.
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }

 private:
  // Keys grouped by endpoint: for each endpoint with keys, their positions in `keys`.
  std::vector<std::pair<size_t, std::vector<size_t>>> SplitByEndpoint(
      std::span<const ChunkKey> keys) const;
  // A request whose whole reply body is wanted; retried; non-2xx statuses become errors. A
  // reply is a lookup's count or a pin's missing keys (8192 at most, about 300 KiB of JSON): one
  // over kMaxCallReplyBytes is DataLoss, not held.
  static constexpr size_t kMaxCallReplyBytes = 1 << 20;
  Result<std::string> Call(
      size_t home, std::string_view method, std::string_view query, const std::string& body,
      const std::vector<std::pair<std::string, std::string>>& headers = {}) const;

  s3::ConnectionPool* pool_;
  const std::string bucket_;
  const FetchOptions options_;
  mutable std::atomic<uint64_t> retries_{0};
};

// Maps an HTTP status of a failed request to a Status: 5xx and 429/503 Unavailable
// (retryable), 404 NotFound, 403 PermissionDenied, other 4xx InvalidArgument.
Status HttpFailure(unsigned status, const std::string& what, const std::string& error_body);

}  // namespace objectcache::client
