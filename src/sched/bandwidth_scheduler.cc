#include "sched/bandwidth_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/name_table.h"

namespace objectcache::sched {

namespace {

constexpr NamedValue<Policy> kPolicyNames[] = {
    {Policy::kEqual, "equal"},
    {Policy::kBytes, "bytes"},
    {Policy::kComputeAware, "compute-aware"},
};
static_assert(ListsEveryValueInOrder(kPolicyNames));

}  // namespace

Result<Policy> ParsePolicy(std::string_view name) {
  return ParseNameIn(kPolicyNames, name, "scheduling policy");
}

const char* PolicyName(Policy policy) {
  return NameIn(kPolicyNames, policy).data();  // every name is a literal, so NUL-ended
}

Result<double> ParseBandwidth(std::string_view text) {
  if (text == "unlimited" || text.empty()) return kUnlimited;
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(std::string(text), &pos);
  } catch (...) {
    pos = 0;
  }
  const std::string unit(text.substr(pos));
  static const std::pair<const char*, double> kUnits[] = {
      {"bit", 1.0 / 8}, {"Kbit", 1e3 / 8},  {"Mbit", 1e6 / 8},    {"Gbit", 1e9 / 8},
      {"B", 1},         {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
      {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  if (pos > 0 && value > 0) {
    for (const auto& [name, scale] : kUnits) {
      if (unit != name) continue;
      // Below the floor a response would wait longer than a duration can say; "inf" is not
      // a rate ("unlimited" is).
      if (!std::isfinite(value * scale) || value * scale < kMinBandwidth) break;
      return value * scale;
    }
  }
  return InvalidArgumentError("bandwidth '" + std::string(text) +
                              "' is not 'unlimited' or a rate from 1Mbit up, such as 50Gbit, "
                              "800Mbit, 2GB, 1GiB");
}

std::vector<double> AllocateRates(Policy policy, double cap, std::span<Transfer> ts) {
  std::vector<double> rates(ts.size(), 0.0);
  std::vector<size_t> active;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].stalled) active.push_back(i);
  }
  if (active.empty()) return rates;
  if (cap == kUnlimited) {
    for (size_t i : active) rates[i] = kUnlimited;
    return rates;
  }
  const double equal = cap / static_cast<double>(active.size());
  switch (policy) {
    case Policy::kEqual:
      for (size_t i : active) rates[i] = equal;
      break;
    case Policy::kBytes: {
      double total = 0;
      for (size_t i : active) total += static_cast<double>(ts[i].total_bytes);
      for (size_t i : active) {
        rates[i] = total > 0 ? cap * static_cast<double>(ts[i].total_bytes) / total : equal;
      }
      break;
    }
    case Policy::kComputeAware: {
      // A request kept exactly at its need stalls at every hiccup of the path; it is given a
      // margin above it.
      auto need = [&](size_t i) { return ts[i].need > 0 ? ts[i].need * kPaceMargin : equal; };
      for (Transfer& t : ts) t.in_pace = t.in_pace && !t.stalled;
      // Admitted transfers keep their need; if the cap no longer covers them all (it was
      // lowered), the largest needs lose their place first.
      std::vector<size_t> kept, others;
      for (size_t i : active) (ts[i].in_pace ? kept : others).push_back(i);
      std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return need(a) < need(b); });
      double left = cap;
      for (size_t i : kept) {
        if (need(i) <= left) {
          rates[i] = need(i);
          left -= need(i);
        } else {
          ts[i].in_pace = false;
          others.push_back(i);
        }
      }
      // Transfers still sending their first layer: every byte of it is added TTFT. Fewest
      // start bytes first takes everything left (shortest job first); the rest wait.
      std::vector<size_t> starting, running;
      for (size_t i : others) (ts[i].start_bytes > 0 ? starting : running).push_back(i);
      if (!starting.empty()) {
        const size_t first =
            *std::min_element(starting.begin(), starting.end(), [&](size_t a, size_t b) {
              return ts[a].start_bytes != ts[b].start_bytes ? ts[a].start_bytes < ts[b].start_bytes
                                                            : a < b;
            });
        rates[first] = left;
        break;
      }
      others = std::move(running);
      // New admissions: smallest need first, while they fit.
      std::sort(others.begin(), others.end(),
                [&](size_t a, size_t b) { return need(a) != need(b) ? need(a) < need(b) : a < b; });
      std::vector<size_t> behind;
      for (size_t i : others) {
        if (behind.empty() && need(i) <= left) {
          ts[i].in_pace = true;
          rates[i] = need(i);
          left -= need(i);
        } else {
          behind.push_back(i);
        }
      }
      if (behind.empty()) {  // everyone keeps pace: share what is left
        for (size_t i : active) rates[i] += left / static_cast<double>(active.size());
        break;
      }
      // The rest: fewest remaining bytes first (shortest job first), each at most its need.
      std::sort(behind.begin(), behind.end(), [&](size_t a, size_t b) {
        return ts[a].remaining_bytes != ts[b].remaining_bytes
                   ? ts[a].remaining_bytes < ts[b].remaining_bytes
                   : a < b;
      });
      for (size_t i : behind) {
        rates[i] = std::min(need(i), left);
        left -= rates[i];
      }
      break;
    }
  }
  return rates;
}

Pacer::Pacer(Policy policy, double cap, ClockFn clock, double stall_after)
    : policy_(policy), cap_(cap), clock_(std::move(clock)), stall_after_(stall_after) {}

uint64_t Pacer::Begin(uint64_t total_bytes, double need, uint64_t start_bytes) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  Active a;
  a.t = {.total_bytes = total_bytes,
         .remaining_bytes = total_bytes,
         .need = need,
         .start_bytes = std::min(start_bytes, total_bytes)};
  a.next = clock_();
  active_.emplace(id, a);
  ReallocateLocked();
  return id;
}

void Pacer::End(uint64_t id) {
  std::lock_guard lock(mu_);
  if (active_.erase(id) > 0) ReallocateLocked();
}

Pacer::Grant Pacer::Reserve(uint64_t id, uint64_t bytes) {
  std::lock_guard lock(mu_);
  const double now = clock_();
  CheckStallsLocked(now);
  auto it = active_.find(id);
  if (it == active_.end()) return {};
  Active& a = it->second;
  // A transfer the scheduler deferred (rate 0) waits for its turn: it asks again shortly.
  if (a.rate <= 0) return {.wait = stall_after_ / 4, .granted = false};
  a.t.remaining_bytes -= std::min<uint64_t>(bytes, a.t.remaining_bytes);
  a.t.start_bytes -= std::min<uint64_t>(bytes, a.t.start_bytes);
  stats_.bytes += bytes;
  if (cap_ == kUnlimited) return {};
  const double start = std::max(now, a.next);
  a.next = start + static_cast<double>(bytes) / a.rate;
  // The remaining-bytes order of compute-aware changes as bytes go.
  if (policy_ == Policy::kComputeAware) ReallocateLocked();
  return {.wait = start - now, .granted = true};
}

void Pacer::WriteStarted(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = active_.find(id);
  if (it != active_.end()) it->second.write_began = clock_();
}

void Pacer::WriteFinished(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return;
  it->second.write_began = -1;
  if (it->second.t.stalled) {
    it->second.t.stalled = false;  // reading again
    it->second.next = std::max(it->second.next, clock_());
    ReallocateLocked();
  }
}

double Pacer::Rate(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = active_.find(id);
  return it == active_.end() ? 0 : it->second.rate;
}

PacerStats Pacer::Stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

void Pacer::CheckStallsLocked(double now) {
  bool changed = false;
  for (auto& [id, a] : active_) {
    if (!a.t.stalled && a.write_began >= 0 && now - a.write_began > stall_after_) {
      a.t.stalled = true;
      stats_.stalls++;
      changed = true;
    }
  }
  if (changed) ReallocateLocked();
}

void Pacer::ReallocateLocked() {
  std::vector<Transfer> ts;
  for (const auto& [id, a] : active_) ts.push_back(a.t);
  const std::vector<double> rates = AllocateRates(policy_, cap_, ts);
  const double now = clock_();
  size_t i = 0;
  for (auto& [id, a] : active_) {
    a.t.in_pace = ts[i].in_pace;
    const double rate = rates[i++];
    // What a transfer still owes for bytes already sent is repaid at its new rate, so a
    // transfer whose share grows goes faster at once (and one whose share shrinks, slower).
    if (a.next > now && a.rate > 0 && a.rate != kUnlimited && rate > 0 && rate != kUnlimited) {
      a.next = now + (a.next - now) * a.rate / rate;
    } else if (rate == kUnlimited || a.next < now) {
      a.next = std::min(a.next, now);
    }
    a.rate = rate;
  }
  stats_.reallocations++;
}

}  // namespace objectcache::sched
