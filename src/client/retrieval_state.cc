#include "client/retrieval_state.h"

#include <optional>
#include <string>

namespace objectcache::client {

RetrievalState::RetrievalState(LayerRange layers, LayerReadyFn on_layer)
    : layers_(layers), on_layer_(std::move(on_layer)), status_(layers.last - layers.first) {}

RetrievalState::~RetrievalState() {
  if (thread_.joinable()) thread_.join();
}

void RetrievalState::Start(std::function<Status()> work) {
  thread_ = std::thread([this, work = std::move(work)] { Finish(CallCatchingExceptions(work)); });
}

void RetrievalState::SetHits(uint32_t hits) {
  {
    std::lock_guard lock(mu_);
    hits_ = hits;
  }
  cv_.notify_all();
}

void RetrievalState::LayerReady(uint32_t layer) {
  {
    std::lock_guard lock(mu_);
    status_[layer - layers_.first] = Status();
  }
  cv_.notify_all();
  if (on_layer_) on_layer_(layer, Status());
}

Result<uint32_t> RetrievalState::Hits() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return hits_.has_value() || done_; });
  if (hits_) return *hits_;
  return final_;
}

Status RetrievalState::WaitForLayer(uint32_t layer) {
  if (layer < layers_.first || layer >= layers_.last) {
    return InvalidArgumentError("layer " + std::to_string(layer) + " is not in the request");
  }
  const size_t i = layer - layers_.first;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return status_[i].has_value() || done_; });
  if (status_[i]) return *status_[i];
  return final_.ok() ? InternalError("retrieval ended without layer " + std::to_string(layer))
                     : final_;
}

Status RetrievalState::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return final_;
}

// The first layer never reached carries the error; later ones never come. Called with mu_ held;
// the layer to report, if any.
std::optional<uint32_t> RetrievalState::FailFirstMissing(const Status& s) {
  if (failed_) return std::nullopt;
  for (size_t i = 0; i < status_.size(); ++i) {
    if (!status_[i]) {
      status_[i] = s;
      failed_ = true;
      return layers_.first + static_cast<uint32_t>(i);
    }
  }
  return std::nullopt;
}

void RetrievalState::Fail(const Status& s) {
  std::optional<uint32_t> failed_layer;
  {
    std::lock_guard lock(mu_);
    failed_layer = FailFirstMissing(s);
  }
  cv_.notify_all();
  if (failed_layer && on_layer_) on_layer_(*failed_layer, s);
}

void RetrievalState::Finish(Status s) {
  std::optional<uint32_t> failed_layer;
  {
    std::lock_guard lock(mu_);
    final_ = std::move(s);
    if (final_.ok()) {
      for (const auto& st : status_) {
        if (!st) final_ = InternalError("a retrieval ended before all its layers were ready");
      }
    }
    done_ = true;
    if (!final_.ok()) failed_layer = FailFirstMissing(final_);
  }
  cv_.notify_all();
  if (failed_layer && on_layer_) on_layer_(*failed_layer, final_);
}

}  // namespace objectcache::client
