// The bookkeeping of one layerwise retrieval: the hit count, each layer's readiness, the end,
// and the thread that does the work. The producer reports the hits once, then layers in
// order, each only once its bytes are verified in place; Finish ends it, reporting the first
// layer not yet ready as failed with the final error. Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "objectcache/client.h"

namespace objectcache::client {

class RetrievalState final : public LayerwiseRetrieval {
 public:
  RetrievalState(LayerRange layers, LayerReadyFn on_layer);
  ~RetrievalState() override;  // waits for the work to end

  // Runs `work` on the retrieval's own thread and finishes with its status.
  void Start(std::function<Status()> work);

  // Producer side.
  void SetHits(uint32_t hits);
  void LayerReady(uint32_t layer);  // in layer order, after the bytes are verified in place
  // The retrieval has failed though its work still runs: the first layer not yet ready fails
  // now (and is reported), not when the work ends.
  void Fail(const Status& s);

  // Consumer side (LayerwiseRetrieval).
  Result<uint32_t> Hits() override;
  Status WaitForLayer(uint32_t layer) override;
  Status Wait() override;

 private:
  void Finish(Status s);
  std::optional<uint32_t> FailFirstMissing(const Status& s);

  const LayerRange layers_;
  const LayerReadyFn on_layer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<uint32_t> hits_;               // guarded by mu_
  std::vector<std::optional<Status>> status_;  // guarded by mu_, per layer of the range
  bool done_ = false;                          // guarded by mu_
  bool failed_ = false;                        // guarded by mu_: a layer carries the error
  Status final_;                               // guarded by mu_
  std::thread thread_;
};

}  // namespace objectcache::client
