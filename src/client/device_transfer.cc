// Retrieval into and saves from paged KV in device memory (include/objectcache/device_kv.h),
// built on the client's layerwise retrieval and save: the client verifies each layer in pinned
// staging, and only verified layers are scattered to the device.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "objectcache/device_kv.h"

namespace objectcache {
namespace {

using device::Device;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Pinned staging: `slots` buffers of `slot_bytes`, freed with the device's FreePinned.
class StagingRing {
 public:
  StagingRing() = default;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  ~StagingRing() {
    if (base_) device_->FreePinned(base_);
  }
  Status Allocate(std::shared_ptr<Device> device, uint32_t slots, uint64_t slot_bytes) {
    device_ = std::move(device);
    slots_ = slots;
    slot_bytes_ = slot_bytes;
    OC_ASSIGN_OR_RETURN(base_, device_->AllocatePinned(slots * slot_bytes));
    return Status();
  }
  std::byte* Slot(uint64_t i) const { return base_ + (i % slots_) * slot_bytes_; }
  uint32_t slots() const { return slots_; }
  uint64_t bytes() const { return slots_ * slot_bytes_; }

 private:
  std::shared_ptr<Device> device_;
  std::byte* base_ = nullptr;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
};

// The checks both directions share: the target's layout, device, bases and blocks; the segments
// of every key.
Result<PagedSegments> CheckTarget(const ModelPreset& model, const DeviceKvTarget& target,
                                  size_t bases, size_t keys, uint32_t staging_layers) {
  OC_RETURN_IF_ERROR(model.layout.Validate());
  if (!target.device) return InvalidArgumentError("no device");
  if (keys == 0) return InvalidArgumentError("no keys");
  if (staging_layers == 0) return InvalidArgumentError("staging needs at least one layer");
  if (target.layer_bases.size() != bases) {
    return InvalidArgumentError(std::to_string(target.layer_bases.size()) + " layer bases given, " +
                                std::to_string(bases) + " needed");
  }
  for (device::DevicePtr base : target.layer_bases) {
    if (base == 0) return InvalidArgumentError("a layer base is null");
  }
  // The bytes of a layer's staging must fit in memory at all (keys is bounded by the caller's
  // vector, the slice by KvLayout's limits).
  uint64_t slot = 0;
  if (__builtin_mul_overflow(model.layout.LayerSliceBytes(), keys, &slot) ||
      slot > (uint64_t{1} << 40)) {
    return InvalidArgumentError("a layer of this request is too large to stage");
  }
  return PagedKvSegments(model.layout, target.paged, target.block_ids, target.first_token, keys);
}

class DeviceRetrievalImpl final : public DeviceRetrieval {
 public:
  explicit DeviceRetrievalImpl(DeviceRetrievalRequest req)
      : req_(std::move(req)),
        device_(req_.target.device),
        range_(req_.layers.last - req_.layers.first),
        slice_(req_.model.layout.LayerSliceBytes()),
        status_(range_),
        enqueued_(range_, false) {}

  ~DeviceRetrievalImpl() override {
    // The network side first: every layer it reached is queued once it ends. (Wait before the
    // pointer goes: its callbacks read it.)
    if (inner_) (void)inner_->Wait();
    inner_.reset();
    if (completion_.joinable()) completion_.join();
    if (stream_) (void)device_->Synchronize(*stream_);
  }

  Status Start(Client& client, PagedSegments segments) {
    chunk_ends_ = std::move(segments.chunk_ends);
    OC_ASSIGN_OR_RETURN(table_, device_->UploadSegments(segments.segments));
    OC_RETURN_IF_ERROR(staging_.Allocate(device_, std::min(req_.staging_layers, range_),
                                         req_.keys.size() * slice_));
    stats_.staging_bytes = staging_.bytes();  // before any thread runs
    OC_ASSIGN_OR_RETURN(stream_, device_->NewStream());
    for (uint32_t i = 0; i < range_; ++i) {
      OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> e, device_->NewEvent());
      events_.push_back(std::move(e));
    }
    start_ = Clock::now();
    LayerwiseRequest inner{.model = req_.model, .keys = req_.keys, .layers = req_.layers};
    inner.mode = req_.mode;
    inner.compute_seconds_per_layer = req_.compute_seconds_per_layer;
    inner.destination = [this](uint32_t layer, size_t chunk) {
      return SlotFor(layer) + chunk * slice_;
    };
    inner.destination_keeps_bytes = false;  // the ring is reused
    inner.on_layer = [this](uint32_t layer, const Status& s) { Verified(layer, s); };
    OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> r,
                        client.RetrieveLayerwise(std::move(inner)));
    {
      std::lock_guard lock(mu_);
      inner_ = std::move(r);
    }
    cv_.notify_all();
    completion_ = std::thread([this] { CompletionLoop(); });
    return Status();
  }

  Result<uint32_t> Hits() override { return Inner()->Hits(); }

  Status WaitForLayer(uint32_t layer) override {
    OC_ASSIGN_OR_RETURN(uint32_t i, Index(layer));
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return status_[i].has_value(); });
    return *status_[i];
  }

  Status StreamWaitForLayer(uint32_t layer, device::Stream& stream) override {
    OC_ASSIGN_OR_RETURN(uint32_t i, Index(layer));
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return enqueued_[i] || status_[i].has_value(); });
      if (status_[i] && !status_[i]->ok()) return *status_[i];
    }
    return device_->StreamWait(stream, *events_[i]);
  }

  Status Wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    for (const auto& s : status_) {
      if (!s->ok()) return *s;
    }
    return Status();
  }

  DeviceTransferStats Stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  // What the completion thread is told about each layer, in order.
  struct Verdict {
    uint32_t layer;
    Status status;      // OK: its copy is enqueued and events_[layer] marks its end
    bool last = false;  // the network side's own failure: nothing follows
  };

  Result<uint32_t> Index(uint32_t layer) const {
    if (layer < req_.layers.first || layer >= req_.layers.last) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " is not in the request");
    }
    return layer - req_.layers.first;
  }

  LayerwiseRetrieval* Inner() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return inner_ != nullptr; });
    return inner_.get();
  }

  // The staging of a layer: waits until the layer `staging.slots()` before it is off it. Once
  // the retrieval has failed and ended, at once: the other connections of a striped retrieval
  // still deliver their stripes (into staging no copy reads any more: no layer is reported
  // after the failure, and every copy before it was waited for) instead of waiting for a slot
  // that is never freed.
  std::byte* SlotFor(uint32_t layer) {
    const uint32_t i = layer - req_.layers.first;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return i < released_ + staging_.slots() || done_; });
    return staging_.Slot(i);
  }

  // From the network side: layer `layer` is in staging and verified (OK), or failed.
  void Verified(uint32_t layer, const Status& verdict) {
    const uint32_t i = layer - req_.layers.first;
    if (!verdict.ok()) {
      Push({layer, verdict, true});  // the last: no layer after it is reported
      return;
    }
    Status s;
    {
      std::lock_guard lock(mu_);
      s = failure_;
    }
    if (s.ok()) {
      Result<uint32_t> hits = Inner()->Hits();
      s = hits.status();
      if (s.ok() && *hits > 0) {
        s = device_->Scatter(*stream_, req_.target.layer_bases[i], staging_.Slot(i), *hits * slice_,
                             *table_, chunk_ends_[*hits - 1]);
      }
      if (s.ok()) s = device_->Record(*events_[i], *stream_);
      std::lock_guard lock(mu_);
      if (s.ok()) {
        enqueued_[i] = true;
        stats_.bytes += (hits.ok() ? *hits : 0) * slice_;
      } else if (failure_.ok()) {
        failure_ = s;
      }
    }
    Push({layer, s});
  }

  void Push(Verdict v) {
    {
      std::lock_guard lock(mu_);
      verdicts_.push_back(std::move(v));
    }
    cv_.notify_all();
  }

  // Waits for each layer's copy in order, reports it, and frees its staging.
  void CompletionLoop() {
    bool failed = false;
    for (uint32_t handled = 0; handled < range_;) {
      Verdict v;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !verdicts_.empty(); });
        v = std::move(verdicts_.front());
        verdicts_.pop_front();
      }
      Status s = v.status;
      if (s.ok()) s = device_->Wait(*events_[v.layer - req_.layers.first]);
      bool report = !failed;
      {
        std::lock_guard lock(mu_);
        if (!s.ok() && failure_.ok()) failure_ = s;
        if (!failure_.ok()) s = failure_;  // no layer is ready after one that failed
        failed = !s.ok();
        status_[v.layer - req_.layers.first] = s;
        ++released_;
        if (s.ok()) {
          ++stats_.layers;
          stats_.seconds = SecondsSince(start_);
        }
        // Its stream's calls (a scatter and an event a layer) and the wait here.
        if (v.status.ok()) ++waits_;
        stats_.driver_calls = stream_->driver_calls + waits_;
      }
      cv_.notify_all();
      if (report && req_.on_layer) req_.on_layer(v.layer, s);
      ++handled;
      if (v.last) break;
    }
    {
      std::lock_guard lock(mu_);
      for (auto& s : status_) {
        if (!s) s = failure_.ok() ? InternalError("the retrieval ended early") : failure_;
      }
      done_ = true;
    }
    cv_.notify_all();
  }

  const DeviceRetrievalRequest req_;
  const std::shared_ptr<Device> device_;
  const uint32_t range_;
  const uint64_t slice_;
  std::vector<size_t> chunk_ends_;
  std::unique_ptr<device::SegmentTable> table_;
  StagingRing staging_;
  std::unique_ptr<device::Stream> stream_;
  std::vector<std::unique_ptr<device::Event>> events_;  // one per layer of the range
  Clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<LayerwiseRetrieval> inner_;  // guarded by mu_ until set
  std::vector<std::optional<Status>> status_;  // guarded by mu_: set once the layer is done
  std::vector<bool> enqueued_;                 // guarded by mu_: its copy is on the stream
  std::deque<Verdict> verdicts_;               // guarded by mu_
  uint32_t released_ = 0;                      // guarded by mu_: layers off the staging ring
  uint64_t waits_ = 0;                         // guarded by mu_: host waits for a copy
  Status failure_;                             // guarded by mu_: the first failure
  bool done_ = false;                          // guarded by mu_
  DeviceTransferStats stats_;                  // guarded by mu_
  std::thread completion_;
};

class DeviceSaveImpl final : public DeviceSave {
 public:
  explicit DeviceSaveImpl(DeviceSaveRequest req)
      : req_(std::move(req)),
        device_(req_.source.device),
        slice_(req_.model.layout.LayerSliceBytes()),
        given_(req_.model.layout.num_layers, false) {}

  ~DeviceSaveImpl() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (saver_.joinable()) saver_.join();
    if (stream_) (void)device_->Synchronize(*stream_);
  }

  Status Start(Client& client, PagedSegments segments) {
    OC_ASSIGN_OR_RETURN(inner_, client.StartSave(req_.model, req_.keys));
    dropped_ = inner_->dropped();
    if (dropped_) return Status();
    OC_ASSIGN_OR_RETURN(table_, device_->UploadSegments(segments.segments));
    const uint32_t slots = std::min(req_.staging_layers, req_.model.layout.num_layers);
    OC_RETURN_IF_ERROR(staging_.Allocate(device_, slots, req_.keys.size() * slice_));
    stats_.staging_bytes = staging_.bytes();  // before any thread runs
    OC_ASSIGN_OR_RETURN(stream_, device_->NewStream());
    for (uint32_t i = 0; i < slots; ++i) {
      OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> computed, device_->NewEvent());
      OC_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> gathered, device_->NewEvent());
      computed_.push_back(std::move(computed));
      gathered_.push_back(std::move(gathered));
    }
    start_ = Clock::now();
    saver_ = std::thread([this] { SaverLoop(); });
    return Status();
  }

  Status SaveLayer(uint32_t layer, device::Stream& stream) override {
    if (layer >= given_.size()) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " is outside the layout (" +
                                  std::to_string(given_.size()) + " layers)");
    }
    if (given_[layer]) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " was saved already");
    }
    given_[layer] = true;
    if (dropped_) return Status();
    uint64_t slot = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return handed_ - released_ < staging_.slots(); });
      if (!failure_.ok()) return failure_;
      slot = handed_ % staging_.slots();
    }
    // The saver's stream waits for the engine's work so far, then gathers the layer.
    Status s = device_->Record(*computed_[slot], stream);
    if (s.ok()) s = device_->StreamWait(*stream_, *computed_[slot]);
    if (s.ok()) {
      s = device_->Gather(*stream_, staging_.Slot(slot), req_.keys.size() * slice_,
                          req_.source.layer_bases[layer], *table_, table_->size());
    }
    if (s.ok()) s = device_->Record(*gathered_[slot], *stream_);
    {
      std::lock_guard lock(mu_);
      if (!s.ok()) {
        if (failure_.ok()) failure_ = s;
        return s;
      }
      ++handed_;
      queue_.push_back({layer, slot});
    }
    cv_.notify_all();
    return Status();
  }

  Status Wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return released_ == handed_; });
    return failure_;
  }

  bool dropped() const override { return dropped_; }

  DeviceTransferStats Stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  // Waits for each layer's gather in order and copies it into the chunk objects.
  void SaverLoop() {
    for (;;) {
      std::pair<uint32_t, uint64_t> item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = queue_.front();
        queue_.pop_front();
      }
      const auto [layer, slot] = item;
      Status s = device_->Wait(*gathered_[slot]);
      if (s.ok()) {
        const std::byte* staged = staging_.Slot(slot);
        s = inner_->SaveLayer(layer, [&](size_t j) { return staged + j * slice_; });
      }
      {
        std::lock_guard lock(mu_);
        if (!s.ok() && failure_.ok()) failure_ = s;
        ++released_;
        if (s.ok()) {
          ++stats_.layers;
          stats_.bytes += req_.keys.size() * slice_;
          stats_.seconds = SecondsSince(start_);
        }
        // The saver stream's calls (a wait for the engine, a gather, an event a layer), the
        // event on the engine's stream and the wait here.
        stats_.driver_calls = stream_->driver_calls + 2 * released_;
      }
      cv_.notify_all();
    }
  }

  const DeviceSaveRequest req_;
  const std::shared_ptr<Device> device_;
  const uint64_t slice_;
  std::vector<bool> given_;  // the engine thread's
  bool dropped_ = false;
  std::unique_ptr<LayerwiseSave> inner_;  // the saver thread's once started
  std::unique_ptr<device::SegmentTable> table_;
  StagingRing staging_;
  std::unique_ptr<device::Stream> stream_;
  std::vector<std::unique_ptr<device::Event>> computed_, gathered_;  // one each per slot
  Clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint32_t, uint64_t>> queue_;  // guarded by mu_: (layer, slot) gathering
  uint64_t handed_ = 0, released_ = 0;               // guarded by mu_
  Status failure_;                                   // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  DeviceTransferStats stats_;                        // guarded by mu_
  std::thread saver_;
};

}  // namespace

Result<std::unique_ptr<DeviceRetrieval>> RetrieveToDevice(Client& client,
                                                          DeviceRetrievalRequest request) {
  const LayerRange r = request.layers;
  if (r.first >= r.last || r.last > request.model.layout.num_layers) {
    return InvalidArgumentError("layer range outside the layout");
  }
  if (request.mode == RetrievalMode::kAggregatedChunkwise ||
      request.mode == RetrievalMode::kPlainChunkwise) {
    return InvalidArgumentError(std::string("a device destination takes a layerwise mode, not ") +
                                RetrievalModeName(request.mode) +
                                " (which would stage the whole prefix)");
  }
  OC_ASSIGN_OR_RETURN(PagedSegments segments,
                      CheckTarget(request.model, request.target, r.last - r.first,
                                  request.keys.size(), request.staging_layers));
  auto retrieval = std::make_unique<DeviceRetrievalImpl>(std::move(request));
  OC_RETURN_IF_ERROR(retrieval->Start(client, std::move(segments)));
  return std::unique_ptr<DeviceRetrieval>(std::move(retrieval));
}

Result<std::unique_ptr<DeviceSave>> SaveFromDevice(Client& client, DeviceSaveRequest request) {
  OC_ASSIGN_OR_RETURN(PagedSegments segments,
                      CheckTarget(request.model, request.source, request.model.layout.num_layers,
                                  request.keys.size(), request.staging_layers));
  auto save = std::make_unique<DeviceSaveImpl>(std::move(request));
  OC_RETURN_IF_ERROR(save->Start(client, std::move(segments)));
  return std::unique_ptr<DeviceSave>(std::move(save));
}

}  // namespace objectcache
