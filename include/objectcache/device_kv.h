// KV straight into and out of an engine's paged cache in device memory (docs/gpu.md).
//
// A layer slice of a chunk object holds the chunk's G tokens as K then V, each token's heads in
// order, each head's head_dim elements contiguous ([2][G][kv_heads][head_dim]; a latent layer:
// [G][width]). An engine keeps the same vectors in blocks of its own layout; PagedKvLayout says
// where, by byte strides, so one description covers vLLM's FLASH_ATTN and FlashInfer layouts,
// per-head (HND) orders and MLA latents, and the bytes in the store are the same whichever
// layout loads or saved them.
//
// RetrieveToDevice brings a cached prefix into the blocks layer by layer: each layer lands in a
// small pinned staging ring (staging_layers layers, never the whole prefix), is verified there
// against its writers' checksums, and only then is scattered asynchronously into its blocks
// (two driver calls and an event a layer on CUDA). The layer is ready when that copy completes:
// the engine waits on the CPU (WaitForLayer) or makes its compute stream wait on the copy
// (StreamWaitForLayer) without waiting itself. Bytes that failed their check never reach the
// device.
//
// SaveFromDevice saves a prefill's new chunks: after the engine's stream has computed layer l,
// SaveLayer has a stream of the saver's wait for that point and gather the chunks' vectors into
// staging, and a thread of the saver hands them to the client's LayerwiseSave; the engine's
// stream never waits for the saver, and the caller only when the staging ring is full.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "objectcache/client.h"
#include "objectcache/device.h"

namespace objectcache {

// Where one layer of an engine's paged KV cache keeps its vectors, in bytes from the layer's
// base: token t of block b has head h's K at b x block_stride + t x token_stride +
// h x head_stride, and its V kv_stride further (a latent layout has no V). Every vector is
// head_dim elements, contiguous. layer_bytes is the layer's extent: every vector of every block
// must lie inside it.
struct PagedKvLayout {
  uint32_t block_size = 16;  // tokens a block
  uint64_t num_blocks = 0;
  uint64_t block_stride = 0, token_stride = 0, head_stride = 0, kv_stride = 0;
  uint64_t layer_bytes = 0;

  // vLLM's FLASH_ATTN cache, (2, num_blocks, block_size, kv_heads, head_dim), contiguous.
  static PagedKvLayout FlashAttn(const KvLayout& kv, uint64_t num_blocks, uint32_t block_size);
  // FlashInfer's (and vLLM's Triton backend's), (num_blocks, 2, block_size, kv_heads, head_dim).
  static PagedKvLayout FlashInfer(const KvLayout& kv, uint64_t num_blocks, uint32_t block_size);
  // The head-major (HND) order, (num_blocks, 2, kv_heads, block_size, head_dim).
  static PagedKvLayout FlashInferHnd(const KvLayout& kv, uint64_t num_blocks, uint32_t block_size);
  // An MLA latent cache, (num_blocks, block_size, width): kv.kind must be latent.
  static PagedKvLayout Latent(const KvLayout& kv, uint64_t num_blocks, uint32_t block_size);

  // InvalidArgument when a field is zero where it may not be, or a vector of some block would
  // lie outside layer_bytes (every product checked for overflow).
  Status Validate(const KvLayout& kv) const;
};

// Where a request's KV lies on a device: the layers' bases and the request's blocks. Token i of
// the request (its first key's first token is i = 0) lies in block_ids[(first_token + i) /
// block_size] at (first_token + i) % block_size.
struct DeviceKvTarget {
  std::shared_ptr<device::Device> device;
  PagedKvLayout paged;
  // A retrieval: one base per layer of its range. A save: one per layer of the model.
  std::vector<device::DevicePtr> layer_bases;
  std::vector<uint32_t> block_ids;
  uint64_t first_token = 0;
};

// The copy segments between a staging buffer holding `chunks` consecutive chunks' slices of one
// layer (chunk j's at j x LayerSliceBytes) and the layer's blocks; adjacent pieces merged.
// chunk_ends[j] is how many segments carry chunks 0..j (the first hits chunks are a prefix).
struct PagedSegments {
  std::vector<device::CopySegment> segments;
  std::vector<size_t> chunk_ends;
};
Result<PagedSegments> PagedKvSegments(const KvLayout& kv, const PagedKvLayout& paged,
                                      std::span<const uint32_t> block_ids, uint64_t first_token,
                                      size_t chunks);

struct DeviceTransferStats {
  uint64_t staging_bytes = 0;  // pinned staging held
  uint32_t layers = 0;         // layers copied
  uint64_t bytes = 0;          // KV bytes copied
  uint64_t driver_calls = 0;   // device calls made to copy them (and wait for them)
  double seconds = 0;          // from the start to the last layer's copy completing
};

struct DeviceRetrievalRequest {
  ModelPreset model;
  std::vector<ChunkKey> keys;
  LayerRange layers;
  DeviceKvTarget target;
  // A layerwise mode: S3Agg-LW or S3-LW (a chunkwise one would stage the whole prefix).
  RetrievalMode mode = RetrievalMode::kAggregatedLayerwise;
  uint32_t staging_layers = 4;
  double compute_seconds_per_layer = 0;
  // Called once per layer, in order, when its copy into the blocks has completed (OK) or it
  // failed (then no later layer follows). From one of the retrieval's threads.
  LayerReadyFn on_layer;
};

class DeviceRetrieval {
 public:
  virtual ~DeviceRetrieval() = default;
  // How many leading keys are delivered; blocks until known.
  virtual Result<uint32_t> Hits() = 0;
  // Blocks until the layer's bytes are in its blocks (OK) or never will be (the error).
  virtual Status WaitForLayer(uint32_t layer) = 0;
  // Blocks until the layer is verified and its copy enqueued, then makes `stream` wait for the
  // copy, and returns without waiting for it. The error when the layer failed.
  virtual Status StreamWaitForLayer(uint32_t layer, device::Stream& stream) = 0;
  // Blocks until the retrieval ends: OK only when every layer is in its blocks.
  virtual Status Wait() = 0;
  virtual DeviceTransferStats Stats() const = 0;
};

// Starts a retrieval into device memory; returns at once. InvalidArgument for a malformed
// request (layouts, bases, blocks too few or out of range, a chunkwise mode).
Result<std::unique_ptr<DeviceRetrieval>> RetrieveToDevice(Client& client,
                                                          DeviceRetrievalRequest request);

struct DeviceSaveRequest {
  ModelPreset model;
  std::vector<ChunkKey> keys;  // the new chunks, in order
  DeviceKvTarget source;       // layer_bases: one per layer of the model
  uint32_t staging_layers = 4;
};

class DeviceSave {
 public:
  virtual ~DeviceSave() = default;
  // Layer `layer` is computed by the work enqueued on `stream` so far: copies the chunks'
  // vectors off the device once that work is done. Blocks only while the staging ring is full.
  // InvalidArgument for a layer outside the model or given twice.
  virtual Status SaveLayer(uint32_t layer, device::Stream& stream) = 0;
  // Blocks until every layer given is off the device and in the chunk objects (the client's
  // write-behind thread then seals and stores them; Client::Flush waits for that).
  virtual Status Wait() = 0;
  // The client's write-behind queue had no room (LayerwiseSave::dropped): nothing is copied.
  virtual bool dropped() const = 0;
  virtual DeviceTransferStats Stats() const = 0;
};

Result<std::unique_ptr<DeviceSave>> SaveFromDevice(Client& client, DeviceSaveRequest request);

}  // namespace objectcache
