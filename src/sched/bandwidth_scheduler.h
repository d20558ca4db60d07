// Sharing a bandwidth cap among concurrent layerwise transfers (docs/scheduler.md).
//
// AllocateRates is the rule: given the cap and what is known of each active transfer, the rate
// each gets under a policy (equal shares, shares by bytes, or compute-aware). Pacer applies it
// on a server: transfers begin and end, each asks before it sends a piece how long to wait, and
// rates are recomputed whenever the set changes. Time comes from an injected clock, so tests
// run on simulated time.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::sched {

enum class Policy { kEqual, kBytes, kComputeAware };
Result<Policy> ParsePolicy(std::string_view name);  // "equal", "bytes", "compute-aware"
const char* PolicyName(Policy policy);

inline constexpr double kUnlimited = std::numeric_limits<double>::infinity();
// Compute-aware gives a request this multiple of its stated need (jitter headroom).
inline constexpr double kPaceMargin = 1.2;

struct Transfer {
  uint64_t total_bytes = 0;
  uint64_t remaining_bytes = 0;
  // The rate that keeps pace with the requester's compute (its per-layer bytes over its
  // per-layer compute time); 0 when the request did not say.
  double need = 0;
  // Bytes still to go before the requester can start computing at all (its first layer):
  // every one of them adds to its TTFT, however fast the rest comes. 0 once they are sent.
  uint64_t start_bytes = 0;
  bool stalled = false;  // its client stopped reading: it gets nothing until it reads again
  // Compute-aware: admitted to keep pace (it gets its need for as long as it lasts). Set by
  // AllocateRates; fed back into the next allocation so admitted transfers are not preempted.
  bool in_pace = false;
};

// Bytes per second for each transfer; the sum never exceeds `cap` (kUnlimited: every transfer
// gets kUnlimited). Stalled transfers get 0 under every policy.
//   equal          cap / active
//   bytes          cap x total_bytes / sum of total_bytes
//   compute-aware  transfers already admitted to keep pace keep their need; then transfers
//                  still sending their first layer (their requesters wait for it before they
//                  can compute anything) get all that is left, fewest start bytes first; then
//                  others are admitted, smallest need first, while their needs fit (a transfer
//                  kept in pace adds almost nothing to its TTFT). What is left goes to the
//                  rest, fewest remaining bytes first, each at most its need; those left with
//                  nothing wait (their admission is deferred). When everyone keeps pace, what
//                  is left is shared equally. A transfer that did not say its need is taken to
//                  need an equal share. Needs count with a margin (kPaceMargin). Sets each
//                  transfer's in_pace.
std::vector<double> AllocateRates(Policy policy, double cap, std::span<Transfer> transfers);

// "unlimited", or a rate: "50Gbit", "800Mbit", "2.5GB", "1GiB" (per second; bit units are
// decimal, "B" units decimal, "iB" units binary). Bytes per second; InvalidArgument otherwise,
// and for a rate that is not finite or is under kMinBandwidth.
inline constexpr double kMinBandwidth = 1e6 / 8;  // 1 Mbit/s: a 2 MiB chunk in 17 s
Result<double> ParseBandwidth(std::string_view text);

// Seconds since a fixed point.
using ClockFn = std::function<double()>;

struct PacerStats {
  uint64_t bytes = 0;  // reserved so far
  uint64_t reallocations = 0;
  uint64_t stalls = 0;  // transfers found stalled
};

// Virtual-time pacing of transfers under one cap. Thread-safe.
//
// A transfer's next piece may start at max(now, its next time), which then advances by
// bytes / its rate. The rates always sum to at most the cap, and when they change, what a
// transfer still owes is repaid at its new rate; so over any interval of length T all
// transfers together send at most cap x T plus one piece per transfer. A transfer whose write
// has not finished `stall_after` seconds after it began is marked stalled and its share goes
// to the others until the write completes.
class Pacer {
 public:
  Pacer(Policy policy, double cap, ClockFn clock, double stall_after = 0.05);

  // A transfer of `total_bytes`, of which the first `start_bytes` must arrive before its
  // requester can compute anything; `need` as in Transfer.
  uint64_t Begin(uint64_t total_bytes, double need, uint64_t start_bytes = 0);
  void End(uint64_t id);  // finished or cancelled: its share goes back at once
  // When `bytes` more of transfer `id` may go: wait `wait` seconds, then send if `granted`
  // (the bytes count as sent then); if not granted (the scheduler deferred this transfer),
  // ask again after the wait.
  struct Grant {
    double wait = 0;
    bool granted = true;
  };
  Grant Reserve(uint64_t id, uint64_t bytes);
  void WriteStarted(uint64_t id);
  void WriteFinished(uint64_t id);

  double Rate(uint64_t id);
  double cap() const { return cap_; }
  Policy policy() const { return policy_; }
  PacerStats Stats();

 private:
  struct Active {
    Transfer t;
    double next = 0;  // virtual time its next byte may go
    double rate = kUnlimited;
    double write_began = -1;  // -1: no write in flight
  };
  void ReallocateLocked();
  void CheckStallsLocked(double now);

  const Policy policy_;
  const double cap_;
  const ClockFn clock_;
  const double stall_after_;
  std::mutex mu_;
  std::map<uint64_t, Active> active_;  // guarded by mu_
  uint64_t next_id_ = 1;               // guarded by mu_
  PacerStats stats_;                   // guarded by mu_
};

}  // namespace objectcache::sched
