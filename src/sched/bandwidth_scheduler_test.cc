#include "sched/bandwidth_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace objectcache::sched {
namespace {

void ExpectRates(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << i;
}

TEST(AllocateRatesTest, EqualAndBytesMatchHandComputedShares) {
  std::vector<Transfer> ts(4, Transfer{.total_bytes = 100, .remaining_bytes = 100});
  EXPECT_EQ(AllocateRates(Policy::kEqual, 100, ts), (std::vector<double>{25, 25, 25, 25}));
  ts[1].stalled = true;  // a stalled transfer's share goes to the others
  std::vector<double> r = AllocateRates(Policy::kEqual, 90, ts);
  EXPECT_EQ(r, (std::vector<double>{30, 0, 30, 30}));
  std::vector<Transfer> sized = {{.total_bytes = 100, .remaining_bytes = 100},
                                 {.total_bytes = 300, .remaining_bytes = 300}};
  EXPECT_EQ(AllocateRates(Policy::kBytes, 100, sized), (std::vector<double>{25, 75}));
  EXPECT_EQ(AllocateRates(Policy::kEqual, kUnlimited, sized)[0], kUnlimited);
}

TEST(AllocateRatesTest, ComputeAwareGivesNeedsAndSharesWhatIsLeft) {
  // Needs 20 and 30; the third did not say (taken as an equal share, 100 / 3).
  // (Stated needs are written as n / kPaceMargin: the scheduler gives n.)
  std::vector<Transfer> ts = {{.total_bytes = 10, .remaining_bytes = 10, .need = 20 / kPaceMargin},
                              {.total_bytes = 10, .remaining_bytes = 10, .need = 30 / kPaceMargin},
                              {.total_bytes = 10, .remaining_bytes = 10, .need = 0}};
  std::vector<double> r = AllocateRates(Policy::kComputeAware, 100, ts);
  const double extra = (100 - 20 - 30 - 100.0 / 3) / 3;
  EXPECT_NEAR(r[0], 20 + extra, 1e-9);
  EXPECT_NEAR(r[1], 30 + extra, 1e-9);
  EXPECT_NEAR(r[2], 100.0 / 3 + extra, 1e-9);
}

TEST(AllocateRatesTest, ComputeAwareKeepsAsManyInPaceAsFitThenShortestFirst) {
  // Needs 60, 50, 40 (150 in all); remaining bytes 600, 100, 200.
  const double m = kPaceMargin;
  std::vector<Transfer> ts = {{.total_bytes = 600, .remaining_bytes = 600, .need = 60 / m},
                              {.total_bytes = 100, .remaining_bytes = 100, .need = 50 / m},
                              {.total_bytes = 200, .remaining_bytes = 200, .need = 40 / m}};
  // Cap 100: C (40) and B (50) keep pace; A gets the 10 left.
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {10, 50, 40});
  for (Transfer& t : ts) t.in_pace = false;  // each case from scratch
  // Cap 70: only C keeps pace (40); of the others B has fewer bytes left: it gets the 30
  // left, and A waits.
  ExpectRates(AllocateRates(Policy::kComputeAware, 70, ts), {0, 30, 40});
  // Cap 30: nobody's need fits; B (fewest bytes) gets 30, the others wait.
  for (Transfer& t : ts) t.in_pace = false;
  ExpectRates(AllocateRates(Policy::kComputeAware, 30, ts), {0, 30, 0});
}

TEST(AllocateRatesTest, ComputeAwareDoesNotPreemptATransferKeptInPace) {
  // A keeps pace at 60 of 100; B arrives needing 50: A is not preempted for B's smaller need.
  const double m = kPaceMargin;
  std::vector<Transfer> ts = {{.total_bytes = 600, .remaining_bytes = 600, .need = 60 / m}};
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {100});
  EXPECT_TRUE(ts[0].in_pace);
  ts.push_back({.total_bytes = 100, .remaining_bytes = 100, .need = 50 / m});
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {60, 40});
  EXPECT_TRUE(ts[0].in_pace);
  EXPECT_FALSE(ts[1].in_pace);
  // A stalled transfer loses its place.
  ts[0].stalled = true;
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {0, 100});
  EXPECT_FALSE(ts[0].in_pace);
}

TEST(AllocateRatesTest, ComputeAwareSendsFirstLayersShortestFirstAfterThoseInPace) {
  // A keeps pace (need 10); B and C still owe their first layers (50 and 20 bytes); D is past
  // its first layer. C's requester is the nearest to computing: it gets all that A leaves.
  const double m = kPaceMargin;
  std::vector<Transfer> ts = {
      {.total_bytes = 500, .remaining_bytes = 400, .need = 10 / m, .in_pace = true},
      {.total_bytes = 500, .remaining_bytes = 500, .need = 10 / m, .start_bytes = 50},
      {.total_bytes = 200, .remaining_bytes = 200, .need = 10 / m, .start_bytes = 20},
      {.total_bytes = 900, .remaining_bytes = 100, .need = 200 / m}};
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {10, 0, 90, 0});
  // C's first layer is in: B's turn.
  ts[2].start_bytes = 0;
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {10, 90, 0, 0});
  // Every first layer in: the usual rule (C admitted at its need, D the rest).
  ts[1].start_bytes = 0;
  ExpectRates(AllocateRates(Policy::kComputeAware, 100, ts), {10, 10, 10, 70});
  // Equal and bytes shares do not look at first layers.
  ts[1].start_bytes = 50;
  ExpectRates(AllocateRates(Policy::kEqual, 100, ts), {25, 25, 25, 25});
}

// Drives transfers through a Pacer on simulated time: each asks for its next piece as soon as
// the previous one was sent; returns (start time, bytes) of every piece sent.
struct Sim {
  double now = 0;
  Pacer pacer;
  explicit Sim(Policy p, double cap) : pacer(p, cap, [this] { return now; }) {}
};

TEST(PacerTest, TheCapIsNeverExceededOverAnyWindow) {
  constexpr double kCap = 1000;  // bytes per simulated second
  constexpr uint64_t kPiece = 10;
  for (Policy policy : {Policy::kEqual, Policy::kBytes, Policy::kComputeAware}) {
    SCOPED_TRACE(PolicyName(policy));
    Sim sim(policy, kCap);
    struct T {
      uint64_t total;
      double need, ready;         // ready: arrival, then when it may ask for its next piece
      uint64_t left = 0, id = 0;  // id 0: not begun, or ended
    };
    std::vector<T> ts = {{2000, 300, 0}, {500, 0, 0.3}, {1000, 900, 0.7}};
    for (T& t : ts) t.left = t.total;
    std::vector<std::pair<double, uint64_t>> sent;
    auto pending = [](const T& t) { return t.left > 0 || t.id != 0; };
    for (int steps = 0; steps < 100000; ++steps) {
      auto next = std::min_element(ts.begin(), ts.end(), [&](const T& a, const T& b) {
        return (pending(a) ? a.ready : 1e18) < (pending(b) ? b.ready : 1e18);
      });
      if (!pending(*next)) break;
      sim.now = next->ready;
      if (next->left == 0) {  // its last piece is through: it ends
        sim.pacer.End(next->id);
        next->id = 0;
        continue;
      }
      if (next->id == 0) next->id = sim.pacer.Begin(next->total, next->need);  // arrives
      Pacer::Grant g = sim.pacer.Reserve(next->id, kPiece);
      next->ready = sim.now + g.wait;
      if (!g.granted) continue;
      sent.emplace_back(next->ready, kPiece);
      next->left -= kPiece;
      if (next->left == 0) next->ready += kPiece / sim.pacer.Rate(next->id);
    }
    uint64_t total = 0;
    for (auto& [t, b] : sent) total += b;
    ASSERT_EQ(total, 3500u);
    std::sort(sent.begin(), sent.end());
    for (double window : {0.01, 0.1, 0.5, 1.0}) {
      for (size_t i = 0; i < sent.size(); ++i) {
        uint64_t bytes = 0;
        for (size_t j = i; j < sent.size() && sent[j].first < sent[i].first + window; ++j) {
          bytes += sent[j].second;
        }
        ASSERT_LE(bytes, kCap * window + ts.size() * kPiece + 1e-6)
            << "window " << window << " at " << sent[i].first;
      }
    }
    // Work-conserving: all 3500 bytes took about 3.5 s, not longer.
    EXPECT_LE(sent.back().first, 3.5 + 0.05);
  }
}

TEST(PacerTest, AFinishedOrCancelledTransferReturnsItsShareAtOnce) {
  Sim sim(Policy::kEqual, 100);
  const uint64_t a = sim.pacer.Begin(1000, 0), b = sim.pacer.Begin(1000, 0);
  EXPECT_EQ(sim.pacer.Rate(a), 50);
  sim.pacer.End(a);
  EXPECT_EQ(sim.pacer.Rate(b), 100);
  // A transfer deferred by compute-aware is admitted the moment the one ahead ends.
  Sim ca(Policy::kComputeAware, 100);
  const uint64_t small = ca.pacer.Begin(100, 100), big = ca.pacer.Begin(10000, 100);
  EXPECT_EQ(ca.pacer.Rate(big), 0);
  EXPECT_FALSE(ca.pacer.Reserve(big, 10).granted);
  ca.pacer.End(small);
  EXPECT_EQ(ca.pacer.Rate(big), 100);
  EXPECT_TRUE(ca.pacer.Reserve(big, 10).granted);
}

TEST(PacerTest, AClientThatStopsReadingDoesNotHoldTheCapHostage) {
  Sim sim(Policy::kComputeAware, 100);
  // Both need 80 of the 100; the one that will stop reading came first and keeps pace.
  const double need = 80 / kPaceMargin;
  const uint64_t stuck = sim.pacer.Begin(100, need), other = sim.pacer.Begin(5000, need);
  EXPECT_NEAR(sim.pacer.Rate(stuck), 80, 1e-9);
  EXPECT_NEAR(sim.pacer.Rate(other), 20, 1e-9);
  ASSERT_TRUE(sim.pacer.Reserve(stuck, 10).granted);
  sim.pacer.WriteStarted(stuck);  // ... and never finishes
  sim.now = 0.2;                  // beyond the stall threshold (0.05 s)
  EXPECT_TRUE(sim.pacer.Reserve(other, 10).granted);
  EXPECT_NEAR(sim.pacer.Rate(other), 100, 1e-9);  // its need, and what is left
  EXPECT_EQ(sim.pacer.Rate(stuck), 0);
  EXPECT_EQ(sim.pacer.Stats().stalls, 1u);
  // Reading again, it is back in line, behind the transfer that now keeps pace (which is not
  // preempted), and gets the whole cap when that one ends.
  sim.pacer.WriteFinished(stuck);
  EXPECT_NEAR(sim.pacer.Rate(other), 80, 1e-9);
  EXPECT_NEAR(sim.pacer.Rate(stuck), 20, 1e-9);
  sim.pacer.End(other);
  EXPECT_NEAR(sim.pacer.Rate(stuck), 100, 1e-9);
}

TEST(PacerTest, BandwidthsParseOverTheirWholeDomain) {
  EXPECT_EQ(*ParseBandwidth("unlimited"), kUnlimited);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("50Gbit"), 50e9 / 8);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("2.5GB"), 2.5e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1GiB"), 1073741824.0);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1Mbit"), kMinBandwidth);
  for (const char* bad : {"0", "0Gbit", "-5Gbit", "1bit", "0.9Mbit", "1e-30Gbit", "nanGbit",
                          "infGbit", "1e400Gbit", "50", "50 Gbit", "50gbit", "Gbit", "fast"}) {
    Result<double> r = ParseBandwidth(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PacerTest, BadPolicyNamesAreRefused) {
  EXPECT_FALSE(ParsePolicy("fair").has_value());
  EXPECT_EQ(*ParsePolicy("compute-aware"), Policy::kComputeAware);
}

}  // namespace
}  // namespace objectcache::sched
