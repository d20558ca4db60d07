#include "objectcache/client.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/dram_tier.h"
#include "client/fetcher.h"
#include "client/retrieval_state.h"
#include "core/name_table.h"
#include "objectcache/chunk_object.h"
#include "s3/connection_pool.h"
#include "wire/layerwise_wire.h"

namespace objectcache {

namespace {

constexpr NamedValue<RetrievalMode> kRetrievalModeNames[] = {
    {RetrievalMode::kAggregatedLayerwise, "S3Agg-LW"},
    {RetrievalMode::kAggregatedChunkwise, "S3Agg-CW"},
    {RetrievalMode::kPlainLayerwise, "S3-LW"},
    {RetrievalMode::kPlainChunkwise, "S3-CW"},
};
static_assert(ListsEveryValueInOrder(kRetrievalModeNames));

}  // namespace

const char* RetrievalModeName(RetrievalMode mode) {
  return NameIn(kRetrievalModeNames, mode).data();  // every name is a literal, so NUL-ended
}

Result<RetrievalMode> ParseRetrievalMode(std::string_view name) {
  return ParseNameIn(kRetrievalModeNames, name, "mode");
}

namespace {

using client::DramTier;
using client::Fetcher;
using client::RetrievalState;
using s3::ConnectionPool;

// A chunk object waiting for the write-behind thread; `seal` when its header is still to be
// written (a layerwise save: the checksums are computed there, off the engine's thread).
struct Pending {
  ChunkKey key;
  std::shared_ptr<std::string> object;
  std::optional<KvLayout> seal;
};

// The chunk objects of finished saves, kept for the next save up to `limit` bytes: a save's
// objects are as large as the KV it saves, and memory a process touches for the first time
// costs a page fault a page, which on a virtual machine made saving 2 GiB from a GPU several
// times slower than copying it (docs/gpu.md). Thread-safe; a buffer given back after the pool
// is gone is freed.
class ObjectBuffers : public std::enable_shared_from_this<ObjectBuffers> {
 public:
  explicit ObjectBuffers(uint64_t limit) : limit_(limit) {}

  // An empty string, with room for `bytes` where a kept one has it.
  std::shared_ptr<std::string> Take(uint64_t bytes) {
    std::unique_ptr<std::string> s;
    {
      std::lock_guard lock(mu_);
      if (!kept_.empty() && kept_.back()->capacity() >= bytes) {
        s = std::move(kept_.back());
        kept_.pop_back();
        held_ -= s->capacity();
      }
    }
    if (!s) s = std::make_unique<std::string>();
    s->clear();
    std::weak_ptr<ObjectBuffers> pool = weak_from_this();
    return std::shared_ptr<std::string>(s.release(), [pool](std::string* p) {
      std::unique_ptr<std::string> owned(p);
      if (std::shared_ptr<ObjectBuffers> alive = pool.lock()) alive->Keep(std::move(owned));
    });
  }

 private:
  void Keep(std::unique_ptr<std::string> s) {
    std::lock_guard lock(mu_);
    if (s->capacity() == 0 || held_ + s->capacity() > limit_) return;
    held_ += s->capacity();
    kept_.push_back(std::move(s));
  }

  const uint64_t limit_;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::string>> kept_;  // guarded by mu_
  uint64_t held_ = 0;                               // guarded by mu_
};

class ClientImpl final : public Client {
 public:
  ClientImpl(std::unique_ptr<s3::ConnectionPool> pool, const ClientOptions& options)
      : pool_(std::move(pool)),
        fetcher_(pool_.get(), options.bucket,
                 {.retries = options.retries,
                  .parallel = options.parallel_requests,
                  .streams = options.aggregated_streams,
                  .wire_version = options.wire_version,
                  .failover = options.failover}),
        dram_(options.dram_tier_bytes > 0 ? std::make_unique<DramTier>(options.dram_tier_bytes)
                                          : nullptr),
        fill_dram_(options.fill_dram_on_retrieve),
        queue_limit_(options.write_behind_bytes),
        buffers_(std::make_shared<ObjectBuffers>(options.write_behind_bytes)),
        writer_([this] { WriteBehindLoop(); }) {}

  ~ClientImpl() override {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    writer_.join();  // drains what is queued first
  }

  void StoreAsync(const ChunkKey& key, std::string chunk_object) override {
    auto object = std::make_shared<std::string>(std::move(chunk_object));
    if (dram_) (void)dram_->Insert(key, object);  // a chunk that fails its check is not cached
    if (!Reserve(object->size(), 1)) return;
    std::vector<Pending> one;
    one.push_back({key, std::move(object), std::nullopt});
    Enqueue(std::move(one));
  }

  Result<std::unique_ptr<LayerwiseSave>> StartSave(const ModelPreset& model,
                                                   std::vector<ChunkKey> keys) override;

  // Takes `bytes` of the write-behind bound for `chunks` chunks; false (and the chunks counted
  // as dropped) when they do not fit.
  bool Reserve(uint64_t bytes, size_t chunks) {
    std::lock_guard lock(queue_mu_);
    if (stopping_ || bytes > queue_limit_ - std::min<uint64_t>(queued_bytes_, queue_limit_)) {
      stats_.dropped += chunks;
      return false;
    }
    queued_bytes_ += bytes;
    return true;
  }
  // Room for one chunk object of a save (a buffer of an earlier save where one is kept).
  std::shared_ptr<std::string> ObjectBuffer(uint64_t bytes) { return buffers_->Take(bytes); }

  // Gives back what Reserve took for chunks that will not be queued.
  void Release(uint64_t bytes, size_t chunks) {
    std::lock_guard lock(queue_mu_);
    queued_bytes_ -= bytes;
    stats_.dropped += chunks;
  }
  // Queues chunks whose bytes are reserved.
  void Enqueue(std::vector<Pending> chunks) {
    {
      std::lock_guard lock(queue_mu_);
      for (Pending& p : chunks) queue_.push_back(std::move(p));
      enqueued_ += chunks.size();
    }
    queue_cv_.notify_all();
  }

  void Flush() override {
    std::unique_lock lock(queue_mu_);
    const uint64_t target = enqueued_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
  }

  ClientStats Stats() const override {
    std::lock_guard lock(queue_mu_);
    ClientStats s = stats_;
    s.dram_bytes = dram_ ? dram_->bytes() : 0;
    s.retries = fetcher_.retries();
    return s;
  }

  Result<size_t> Lookup(std::span<const ChunkKey> keys) override {
    const size_t local = dram_ ? dram_->Prefix(keys, nullptr).size() : 0;
    if (local == keys.size()) return local;
    OC_ASSIGN_OR_RETURN(size_t remote, fetcher_.Lookup(keys.subspan(local)));
    return local + remote;
  }

  Result<std::vector<ChunkKey>> Pin(std::span<const ChunkKey> keys,
                                    std::chrono::seconds ttl) override {
    return fetcher_.Pin(keys, ttl);
  }

  Result<std::unique_ptr<LayerwiseRetrieval>> RetrieveLayerwise(LayerwiseRequest request) override {
    OC_RETURN_IF_ERROR(request.model.layout.Validate());
    const LayerRange r = request.layers;
    if (request.keys.empty()) return InvalidArgumentError("no keys");
    if (r.first >= r.last || r.last > request.model.layout.num_layers) {
      return InvalidArgumentError("layer range outside the layout");
    }
    if (!request.destination) {
      if (request.regions.size() != r.last - r.first) {
        return InvalidArgumentError("one region per layer of the range is needed");
      }
      const uint64_t slice = request.model.layout.LayerSliceBytes();
      for (const auto& region : request.regions) {
        if (region.size() < request.keys.size() * slice) {
          return InvalidArgumentError("a layer region is smaller than keys x slice bytes");
        }
      }
      request.destination = [regions = request.regions, first = r.first, slice](uint32_t layer,
                                                                                size_t chunk) {
        return regions[layer - first].data() + chunk * slice;
      };
    } else if (!request.regions.empty()) {
      return InvalidArgumentError("give regions or a destination, not both");
    }
    auto state = std::make_unique<RetrievalState>(r, request.on_layer);
    RetrievalState* st = state.get();
    state->Start([this, st, req = std::move(request)] { return Retrieve(req, st); });
    return std::unique_ptr<LayerwiseRetrieval>(std::move(state));
  }

 private:
  // The retrieval's own thread: the DRAM tier's prefix, then the network for the rest. DRAM
  // slices of a layer are copied just before the layer is reported, so both parts of a layer
  // are in place when it is.
  Status Retrieve(const LayerwiseRequest& req, RetrievalState* st) {
    const KvLayout& layout = req.model.layout;
    const uint64_t slice = layout.LayerSliceBytes();
    const LayerRange r = req.layers;
    std::vector<std::shared_ptr<const DramTier::Entry>> local;
    if (dram_) local = dram_->Prefix(req.keys, &layout);
    auto copy_local = [&](uint32_t layer) {
      for (size_t j = 0; j < local.size(); ++j) {
        std::memcpy(req.destination(layer, j), local[j]->Slice(layer).data(), slice);
      }
    };
    auto deliver_local = [&] {
      st->SetHits(static_cast<uint32_t>(local.size()));
      for (uint32_t layer = r.first; layer < r.last; ++layer) {
        copy_local(layer);
        st->LayerReady(layer);
      }
      return Status();
    };
    if (local.size() == req.keys.size()) return deliver_local();
    const bool chunkwise = req.mode == RetrievalMode::kAggregatedChunkwise ||
                           req.mode == RetrievalMode::kPlainChunkwise;
    std::optional<uint32_t> remote_hits;
    client::FetchEvents events{.hits =
                                   [&](uint32_t hits) {
                                     remote_hits = hits;
                                     st->SetHits(static_cast<uint32_t>(local.size()) + hits);
                                   },
                               .layer_ready =
                                   [&](uint32_t layer) {
                                     if (chunkwise) return;  // handed over once everything is in
                                     copy_local(layer);
                                     st->LayerReady(layer);
                                   },
                               .failed = [&](const Status& s) { st->Fail(s); }};
    const client::FetchTarget target{
        .model = &req.model,
        .keys = std::span(req.keys).subspan(local.size()),
        .layers = r,
        .slot = [&](uint32_t layer,
                    uint64_t j) { return req.destination(layer, local.size() + j); },
        .compute_seconds_per_layer = req.compute_seconds_per_layer};
    Status s;
    switch (req.mode) {
      case RetrievalMode::kAggregatedLayerwise:
      case RetrievalMode::kAggregatedChunkwise:
        s = fetcher_.Aggregated(target, events);
        break;
      case RetrievalMode::kPlainLayerwise:
        s = fetcher_.PlainLayerwise(target, events);
        break;
      case RetrievalMode::kPlainChunkwise:
        s = fetcher_.PlainChunkwise(target, events);
        break;
    }
    // The network failed before it promised anything: the DRAM prefix is still a hit.
    if (!s.ok() && !remote_hits && !local.empty()) return deliver_local();
    OC_RETURN_IF_ERROR(s);
    if (chunkwise) {
      for (uint32_t layer = r.first; layer < r.last; ++layer) {
        copy_local(layer);
        st->LayerReady(layer);
      }
    }
    if (dram_ && fill_dram_ && req.destination_keeps_bytes && r.first == 0 &&
        r.last == layout.num_layers) {
      FillDram(req, local.size(), *remote_hits);
    }
    return Status();
  }

  // Caches chunks [first, first + count) of a finished full-range retrieval in the DRAM tier.
  void FillDram(const LayerwiseRequest& req, size_t first, size_t count) {
    const KvLayout& layout = req.model.layout;
    const uint64_t slice = layout.LayerSliceBytes();
    std::string kv(layout.ChunkKvBytes(), '\0');
    for (size_t j = first; j < first + count; ++j) {
      for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
        std::memcpy(kv.data() + layer * slice, req.destination(layer, j), slice);
      }
      Result<std::string> object = EncodeChunkObject(layout, req.keys[j], AsBytes(kv));
      if (object) {
        (void)dram_->Insert(req.keys[j], std::make_shared<const std::string>(std::move(*object)));
      }
    }
  }

  // Sends queued chunks in batch-store requests of up to kBatchBytes / kBatchRecords.
  void WriteBehindLoop() {
    constexpr size_t kBatchBytes = 32 << 20, kBatchRecords = 256;
    for (;;) {
      std::vector<Pending> batch;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        size_t bytes = 0;
        while (!queue_.empty() && batch.size() < kBatchRecords &&
               (batch.empty() || bytes + queue_.front().object->size() <= kBatchBytes)) {
          bytes += queue_.front().object->size();
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        queued_bytes_ -= bytes;
      }
      std::vector<std::pair<ChunkKey, const std::string*>> records;
      for (Pending& p : batch) {
        if (p.seal) {
          std::span<std::byte> bytes(reinterpret_cast<std::byte*>(p.object->data()),
                                     p.object->size());
          if (!SealChunkObject(*p.seal, p.key, bytes).ok()) continue;  // sized by StartSave
          if (dram_) (void)dram_->Insert(p.key, p.object);
        }
        records.emplace_back(p.key, p.object.get());
      }
      const Status s = fetcher_.BatchStore(records);
      {
        std::lock_guard lock(queue_mu_);
        (s.ok() ? stats_.stored : stats_.failed) += batch.size();
        finished_ += batch.size();
      }
      done_cv_.notify_all();
    }
  }

  std::unique_ptr<s3::ConnectionPool> pool_;
  const Fetcher fetcher_;
  const std::unique_ptr<DramTier> dram_;  // null: no DRAM tier
  const bool fill_dram_;
  const size_t queue_limit_;
  const std::shared_ptr<ObjectBuffers> buffers_;  // for saves' chunk objects
  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_, done_cv_;
  // guarded by queue_mu_:
  std::deque<Pending> queue_;
  size_t queued_bytes_ = 0;               // guarded by queue_mu_
  uint64_t enqueued_ = 0, finished_ = 0;  // guarded by queue_mu_
  bool stopping_ = false;                 // guarded by queue_mu_
  ClientStats stats_;                     // guarded by queue_mu_
  std::thread writer_;                    // last: starts after everything it uses
};

class SaveImpl final : public LayerwiseSave {
 public:
  SaveImpl(ClientImpl* client, const KvLayout& layout, std::vector<ChunkKey> keys)
      : client_(client),
        layout_(layout),
        geometry_(ChunkGeometry(layout, ChunkKey())),
        keys_(std::move(keys)),
        have_(layout.num_layers, false) {
    dropped_ = !client_->Reserve(Bytes(), keys_.size());
    if (dropped_) return;
    objects_.reserve(keys_.size());
    for (size_t j = 0; j < keys_.size(); ++j) {
      // Allocated without zero-filling the slices (they are all copied over); the header
      // region is written when sealed and the padding after each slice is zeroed here.
      // The operation returns the size itself: GCC 12's libstdc++ may hand it the grown
      // capacity instead of the size asked for.
      std::shared_ptr<std::string> object = client_->ObjectBuffer(geometry_.ObjectBytes());
      const size_t bytes = geometry_.ObjectBytes();
      object->resize_and_overwrite(bytes, [&](char* p, size_t) {
        for (uint32_t l = 0; l < layout_.num_layers; ++l) {
          const uint64_t end = geometry_.LayerOffset(l) + geometry_.LayerSliceBytes();
          std::memset(p + end, 0, geometry_.layer_stride - geometry_.LayerSliceBytes());
        }
        return bytes;
      });
      objects_.push_back(std::move(object));
    }
  }

  ~SaveImpl() override {
    if (!dropped_ && !handed_over_) client_->Release(Bytes(), keys_.size());
  }

  Status SaveLayer(uint32_t layer, const SliceSourceFn& source) override {
    if (layer >= layout_.num_layers) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " is outside the layout (" +
                                  std::to_string(layout_.num_layers) + " layers)");
    }
    if (have_[layer]) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " was saved already");
    }
    if (dropped_) return Status();
    const uint64_t offset = geometry_.LayerOffset(layer), slice = geometry_.LayerSliceBytes();
    for (size_t j = 0; j < keys_.size(); ++j) {
      std::memcpy(objects_[j]->data() + offset, source(j), slice);
    }
    have_[layer] = true;
    if (++layers_in_ == layout_.num_layers) {
      std::vector<Pending> chunks;
      for (size_t j = 0; j < keys_.size(); ++j) {
        chunks.push_back({keys_[j], std::move(objects_[j]), layout_});
      }
      handed_over_ = true;
      client_->Enqueue(std::move(chunks));
    }
    return Status();
  }

  bool dropped() const override { return dropped_; }

 private:
  // What the save holds until stored; the bound is checked before anything is allocated (a
  // product past u64 cannot fit either).
  uint64_t Bytes() const {
    uint64_t bytes = 0;
    return __builtin_mul_overflow(geometry_.ObjectBytes(), keys_.size(), &bytes) ? UINT64_MAX
                                                                                 : bytes;
  }

  ClientImpl* const client_;
  const KvLayout layout_;
  const ChunkHeader geometry_;
  const std::vector<ChunkKey> keys_;
  std::vector<std::shared_ptr<std::string>> objects_;
  std::vector<bool> have_;
  uint32_t layers_in_ = 0;
  bool dropped_ = false, handed_over_ = false;
};

Result<std::unique_ptr<LayerwiseSave>> ClientImpl::StartSave(const ModelPreset& model,
                                                             std::vector<ChunkKey> keys) {
  OC_RETURN_IF_ERROR(model.layout.Validate());
  if (keys.empty()) return InvalidArgumentError("no keys to save");
  return std::unique_ptr<LayerwiseSave>(new SaveImpl(this, model.layout, std::move(keys)));
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.endpoints.empty()) return InvalidArgumentError("no endpoints");
  if (options.bucket.empty()) return InvalidArgumentError("no bucket");
  if (options.wire_version != wire::kLayerwiseV1 && options.wire_version != wire::kLayerwiseV2) {
    return InvalidArgumentError("wire_version must be 1 or 2");
  }
  if (options.timeout <= std::chrono::seconds(0) || options.timeout > std::chrono::hours(24)) {
    return InvalidArgumentError("timeout must be in (0, 86400] seconds");
  }
  if (options.retries < 0 || options.retries > 100 || options.parallel_requests < 1 ||
      options.parallel_requests > 1024 || options.aggregated_streams < 0 ||
      options.aggregated_streams > 8) {
    return InvalidArgumentError(
        "retries must be 0 to 100, parallel_requests 1 to 1024, aggregated_streams 0 (one per "
        "4 cores) to 8");
  }
  std::vector<s3::S3Endpoint> endpoints;
  for (const std::string& url : options.endpoints) {
    OC_ASSIGN_OR_RETURN(s3::S3Endpoint e, s3::S3Endpoint::Parse(url));
    e.ca_file = options.ca_file;
    endpoints.push_back(std::move(e));
  }
  s3::S3Credentials credentials = s3::S3Credentials::FromEnvironment();
  if (!options.access_key.empty() || !options.secret_key.empty()) {
    credentials.access_key = options.access_key;
    credentials.secret_key = options.secret_key;
  }
  return std::unique_ptr<Client>(new ClientImpl(
      std::make_unique<s3::ConnectionPool>(std::move(endpoints), std::move(credentials),
                                           options.timeout, options.max_idle_connections),
      options));
}

}  // namespace objectcache
