// An emulated layerwise prefill: the consumer of layerwise retrieval in the TTFT experiment.
//
// The compute time of each layer comes from a model profile and a GPU profile (docs/engine.md,
// "Compute model"): linear layers cost 2 x (parameters per layer) FLOPs per new token, causal
// attention over c cached and n new tokens 4 x hidden x (n x c + n^2 / 2) FLOPs per layer, at the
// GPU's effective rate. The loop waits for each layer's KV and hands the layer to an emulated
// GPU, which computes it for the profile's time from the later of the KV's arrival and the end of
// the previous layer (the loop runs ahead, as an engine's launching thread does; at the end it
// waits on a Clock until the GPU is done, leaving the CPU free); it records TTFT and per-layer
// stalls. Time is injected (Clock), so tests need no sleeps. docs/engine.md has the profiles and
// their assumptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "objectcache/kv_layout.h"
#include "objectcache/status.h"

namespace objectcache::engine {

struct GpuProfile {
  std::string name;
  double flops_per_second = 0;  // effective bf16 rate for prefill
  std::string assumptions;
};

// "h100", "h200".
const std::vector<GpuProfile>& GpuProfiles();
Result<GpuProfile> FindGpuProfile(std::string_view name);

// What the compute model needs about a model, beyond its KV layout.
struct ModelCompute {
  std::string name;
  uint32_t layers = 0;
  uint64_t hidden = 0;
  uint64_t params_per_layer = 0;
};

// For the presets of kv_layout.h.
Result<ModelCompute> FindModelCompute(std::string_view model);

// FLOPs of one layer's prefill of `new_tokens` after `cached_tokens`.
double LayerFlops(const ModelCompute& model, uint64_t cached_tokens, uint64_t new_tokens);

// Seconds since some fixed point, and waiting. Thread-compatible.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() = 0;
  virtual void SleepFor(double seconds) = 0;
};
// The steady clock and real sleeps.
Clock& RealClock();

struct PrefillPlan {
  ModelCompute model;
  GpuProfile gpu;
  uint64_t cached_tokens = 0;  // loaded instead of computed
  uint64_t new_tokens = 0;     // computed
  // Compute times are multiplied by this (time dilation: > 1 slows the emulated GPU).
  double dilation = 1.0;
};

struct PrefillResult {
  double ttft_seconds = 0;
  double compute_seconds = 0;
  std::vector<double> stall_seconds;  // per layer: the GPU's idle time waiting for its KV
  Status status;                      // the first layer whose KV failed, if any
};

// Runs the prefill: for each layer l, wait_for_layer(l) (blocks until its KV is ready; an error
// ends the run), then the GPU computes layer l for its time once it is free. Starts the TTFT
// clock at the call; TTFT ends when the GPU finishes the last layer.
PrefillResult RunPrefill(const PrefillPlan& plan,
                         const std::function<Status(uint32_t layer)>& wait_for_layer,
                         Clock& clock = RealClock());

}  // namespace objectcache::engine
