#include "engine/prefill.h"

#include <algorithm>
#include <thread>

namespace objectcache::engine {

const std::vector<GpuProfile>& GpuProfiles() {
  static const std::vector<GpuProfile> profiles = {
      {"h100", 400e12,
       "H100 SXM, bf16 dense peak 989 TFLOP/s; prefill reaches about 40% of it in practice"},
      {"h200", 450e12,
       "H200 SXM, same compute die as H100 with faster HBM3e; prefill a little faster (about "
       "45% of the 989 TFLOP/s peak); not yet calibrated on a real GPU"},
  };
  return profiles;
}

Result<GpuProfile> FindGpuProfile(std::string_view name) {
  for (const GpuProfile& p : GpuProfiles()) {
    if (p.name == name) return p;
  }
  return NotFoundError("unknown GPU profile '" + std::string(name) + "' (known: h100, h200)");
}

Result<ModelCompute> FindModelCompute(std::string_view model) {
  // Parameters per layer: (total - input and output embeddings) / layers, from the published
  // model configurations (docs/engine.md).
  static const std::vector<ModelCompute> models = {
      {"llama-3.1-8b", 32, 4096, 218'000'000},
      {"llama-3.1-70b", 80, 8192, 856'000'000},
      {"granite-3.3-8b", 40, 4096, 193'000'000},
      {"deepseek-r1-distill-qwen-7b", 28, 3584, 233'000'000},
  };
  for (const ModelCompute& m : models) {
    if (m.name == model) return m;
  }
  return NotFoundError("no compute profile for model '" + std::string(model) + "'");
}

double LayerFlops(const ModelCompute& model, uint64_t cached_tokens, uint64_t new_tokens) {
  const double n = static_cast<double>(new_tokens), c = static_cast<double>(cached_tokens);
  return 2.0 * static_cast<double>(model.params_per_layer) * n +
         4.0 * static_cast<double>(model.hidden) * (n * c + n * n / 2.0);
}

namespace {
class SteadyClock final : public Clock {
 public:
  double Now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void SleepFor(double seconds) override {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};
}  // namespace

Clock& RealClock() {
  static SteadyClock clock;
  return clock;
}

PrefillResult RunPrefill(const PrefillPlan& plan,
                         const std::function<Status(uint32_t layer)>& wait_for_layer,
                         Clock& clock) {
  PrefillResult r;
  const double start = clock.Now();
  const double layer_seconds = LayerFlops(plan.model, plan.cached_tokens, plan.new_tokens) /
                               plan.gpu.flops_per_second * plan.dilation;
  // When the emulated GPU finishes the layers handed to it so far. The caller's thread runs
  // ahead of it, as an engine's launching thread runs ahead of its GPU: it waits for layer l's
  // KV, hands the layer over and goes on to wait for the next, while the GPU computes layer l
  // from the later of its KV and the end of layer l - 1. A late wake-up of that thread (a busy
  // CPU) costs nothing while the GPU still has work, as on a real one; the old loop slept each
  // layer's time on the thread itself, and every wake-up's lateness added up into the TTFT.
  double gpu_done = start;
  for (uint32_t layer = 0; layer < plan.model.layers; ++layer) {
    Status s = wait_for_layer(layer);
    const double ready = clock.Now();
    r.stall_seconds.push_back(std::max(0.0, ready - gpu_done));  // the GPU idle for this layer
    if (!s.ok()) {
      r.status = s.Annotate("waiting for layer " + std::to_string(layer));
      break;
    }
    gpu_done = std::max(gpu_done, ready) + layer_seconds;
    r.compute_seconds += layer_seconds;
  }
  // The GPU's last layer; nothing to wait for when no layer was handed over (a model of none).
  if (const double left = gpu_done - clock.Now(); r.status.ok() && left > 0) clock.SleepFor(left);
  r.ttft_seconds = clock.Now() - start;
  return r;
}

}  // namespace objectcache::engine
