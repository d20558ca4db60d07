#include "engine/prefill.h"

#include <gtest/gtest.h>

namespace objectcache::engine {
namespace {

// Simulated time: nothing sleeps, every duration is exact.
class FakeClock final : public Clock {
 public:
  double Now() override { return now; }
  void SleepFor(double seconds) override { now += seconds; }
  double now = 1000;
};

PrefillPlan Plan() {
  PrefillPlan p;
  p.model = *FindModelCompute("llama-3.1-8b");
  p.gpu = *FindGpuProfile("h100");
  p.cached_tokens = 2048;
  p.new_tokens = 2048;
  return p;
}

TEST(PrefillTest, LayerFlopsFollowTheArchitectureFormula) {
  ModelCompute m{"m", 2, 1000, 10};
  // 2 x 10 x 4 + 4 x 1000 x (4 x 6 + 16 / 2) = 80 + 128000
  EXPECT_DOUBLE_EQ(LayerFlops(m, 6, 4), 128080.0);
}

TEST(PrefillTest, KvReadyAheadOfComputeAddsNothing) {
  FakeClock clock;
  PrefillPlan plan = Plan();
  const double layer = LayerFlops(plan.model, 2048, 2048) / plan.gpu.flops_per_second;
  PrefillResult r = RunPrefill(
      plan, [](uint32_t) { return Status(); }, clock);
  ASSERT_TRUE(r.status.ok());
  EXPECT_NEAR(r.ttft_seconds, 32 * layer, 1e-9);
  EXPECT_NEAR(r.compute_seconds, 32 * layer, 1e-9);
  for (double s : r.stall_seconds) EXPECT_EQ(s, 0);
}

TEST(PrefillTest, SlowKvShowsAsPerLayerStalls) {
  FakeClock clock;
  PrefillPlan plan = Plan();
  plan.dilation = 2;
  const double layer = 2 * LayerFlops(plan.model, 2048, 2048) / plan.gpu.flops_per_second;
  // Layer l's KV arrives at start + (l + 1) x 1.5 x layer: a stall before every layer.
  const double start = clock.now;
  PrefillResult r = RunPrefill(
      plan,
      [&](uint32_t l) {
        const double ready = start + (l + 1) * 1.5 * layer;
        if (clock.now < ready) clock.now = ready;
        return Status();
      },
      clock);
  ASSERT_TRUE(r.status.ok());
  EXPECT_NEAR(r.stall_seconds[0], 1.5 * layer, 1e-12);
  EXPECT_NEAR(r.stall_seconds[1], 0.5 * layer, 1e-12);
  EXPECT_NEAR(r.ttft_seconds, 32 * 1.5 * layer + layer, 1e-9);
}

TEST(PrefillTest, ALateWakeUpWhileTheGpuIsBusyAddsNothing) {
  FakeClock clock;
  PrefillPlan plan = Plan();
  const double layer = LayerFlops(plan.model, 2048, 2048) / plan.gpu.flops_per_second;
  // Every KV is ready, but each wait returns half a layer late (a thread woken late on a busy
  // CPU): only the first one, before the GPU has anything to do, shows.
  PrefillResult r = RunPrefill(
      plan,
      [&](uint32_t) {
        clock.now += 0.5 * layer;
        return Status();
      },
      clock);
  ASSERT_TRUE(r.status.ok());
  EXPECT_NEAR(r.stall_seconds[0], 0.5 * layer, 1e-12);
  for (size_t l = 1; l < r.stall_seconds.size(); ++l) EXPECT_EQ(r.stall_seconds[l], 0) << l;
  EXPECT_NEAR(r.ttft_seconds, 0.5 * layer + 32 * layer, 1e-9);
}

TEST(PrefillTest, FailedLayerEndsThePrefill) {
  FakeClock clock;
  PrefillResult r = RunPrefill(
      Plan(), [](uint32_t l) { return l == 3 ? DataLossError("checksum") : Status(); }, clock);
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.stall_seconds.size(), 4u);
}

TEST(PrefillTest, ProfilesExistForEveryPreset) {
  for (const ModelPreset& p : ModelPresets()) {
    Result<ModelCompute> m = FindModelCompute(p.name);
    ASSERT_TRUE(m.has_value()) << p.name;
    EXPECT_EQ(m->layers, p.layout.num_layers) << p.name;
  }
  EXPECT_EQ(FindGpuProfile("tpu").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace objectcache::engine
