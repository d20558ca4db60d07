// One budget for the memory the server holds on behalf of requests: small bodies read whole
// (XML, JSON), the streaming buffer of each upload and the read-ahead windows of layerwise
// responses, and the windows kept between responses (window_buffers.h). A request takes a lease as
// its bytes arrive, never ahead of them, and gives it back when it ends; one that would pass the
// budget is answered 503 SlowDown (clients retry) instead of growing the process. docs/security.md
// lists the budget with the other limits.
//
// Thread-safe: leases are taken and returned from any worker.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

namespace objectcache::server {

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Bytes held for one request; returned to the budget when destroyed. Must not outlive the
  // budget.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(MemoryBudget* budget) : budget_(budget) {}
    Lease(Lease&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        Release();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
      }
      return *this;
    }
    ~Lease() { Release(); }

    // Grows the lease to `total` bytes; false (and unchanged) when the budget cannot give them.
    [[nodiscard]] bool GrowTo(uint64_t total) {
      if (total <= bytes_) return true;
      if (!budget_->TryTake(total - bytes_)) return false;
      bytes_ = total;
      return true;
    }
    // Gives back what the lease holds past `total` bytes.
    void ShrinkTo(uint64_t total) {
      if (total >= bytes_) return;
      budget_->Give(bytes_ - total);
      bytes_ = total;
    }
    // Moves `n` of the lease's bytes (at most all it holds) into a lease of their own.
    Lease Split(uint64_t n) {
      n = std::min(n, bytes_);
      bytes_ -= n;
      Lease part(budget_);
      part.bytes_ = n;
      return part;
    }
    uint64_t bytes() const { return bytes_; }

   private:
    void Release() {
      if (budget_ != nullptr && bytes_ > 0) budget_->Give(bytes_);
      bytes_ = 0;
    }
    MemoryBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  Lease NewLease() { return Lease(this); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  bool TryTake(uint64_t n) {
    uint64_t cur = used_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ || cur > limit_ - n) return false;
    } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    return true;
  }
  void Give(uint64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }

  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace objectcache::server
