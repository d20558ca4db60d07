#include "objectcache/client.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "client/dram_tier.h"
#include "client/fetcher.h"
#include "client/retrieval_state.h"
#include "objectcache/chunk_object.h"
#include "s3/connection_pool.h"

namespace objectcache {

const char* RetrievalModeName(RetrievalMode mode) {
  switch (mode) {
    case RetrievalMode::kAggregatedLayerwise:
      return "S3Agg-LW";
    case RetrievalMode::kAggregatedChunkwise:
      return "S3Agg-CW";
    case RetrievalMode::kPlainLayerwise:
      return "S3-LW";
    case RetrievalMode::kPlainChunkwise:
      return "S3-CW";
  }
  return "?";
}

namespace {

using client::DramTier;
using client::Fetcher;
using client::RetrievalState;
using s3::ConnectionPool;

class ClientImpl final : public Client {
 public:
  ClientImpl(std::unique_ptr<s3::ConnectionPool> pool, const ClientOptions& options)
      : pool_(std::move(pool)),
        fetcher_(pool_.get(), options.bucket,
                 {.retries = options.retries,
                  .parallel = options.parallel_requests,
                  .streams = options.aggregated_streams}),
        dram_(options.dram_tier_bytes > 0 ? std::make_unique<DramTier>(options.dram_tier_bytes)
                                          : nullptr),
        fill_dram_(options.fill_dram_on_retrieve),
        queue_limit_(options.write_behind_bytes),
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
    auto object = std::make_shared<const std::string>(std::move(chunk_object));
    if (dram_) (void)dram_->Insert(key, object);  // a chunk that fails its check is not cached
    {
      std::lock_guard lock(queue_mu_);
      if (queued_bytes_ + object->size() > queue_limit_ || stopping_) {
        stats_.dropped++;
        return;
      }
      queued_bytes_ += object->size();
      queue_.emplace_back(key, std::move(object));
      enqueued_++;
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
                                   }};
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
    if (dram_ && fill_dram_ && r.first == 0 && r.last == layout.num_layers) {
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
      std::vector<std::pair<ChunkKey, std::shared_ptr<const std::string>>> batch;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        size_t bytes = 0;
        while (!queue_.empty() && batch.size() < kBatchRecords &&
               (batch.empty() || bytes + queue_.front().second->size() <= kBatchBytes)) {
          bytes += queue_.front().second->size();
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        queued_bytes_ -= bytes;
      }
      std::vector<std::pair<ChunkKey, const std::string*>> records;
      for (const auto& [key, object] : batch) records.emplace_back(key, object.get());
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
  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_, done_cv_;
  // guarded by queue_mu_:
  std::deque<std::pair<ChunkKey, std::shared_ptr<const std::string>>> queue_;
  size_t queued_bytes_ = 0;               // guarded by queue_mu_
  uint64_t enqueued_ = 0, finished_ = 0;  // guarded by queue_mu_
  bool stopping_ = false;                 // guarded by queue_mu_
  ClientStats stats_;                     // guarded by queue_mu_
  std::thread writer_;                    // last: starts after everything it uses
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.endpoints.empty()) return InvalidArgumentError("no endpoints");
  if (options.bucket.empty()) return InvalidArgumentError("no bucket");
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
  return std::unique_ptr<Client>(
      new ClientImpl(std::make_unique<s3::ConnectionPool>(std::move(endpoints),
                                                          std::move(credentials), options.timeout),
                     options));
}

}  // namespace objectcache
