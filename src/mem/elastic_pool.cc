#include <algorithm>
#include <condition_variable>
#include <set>
#include <thread>
#include <utility>

#include "objectcache/kv_pool.h"

namespace objectcache {

bool PhysicalBudget::TryTake(uint64_t bytes) {
  uint64_t used = used_.load();
  do {
    if (used + bytes > limit_.load()) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}
void PhysicalBudget::Give(uint64_t bytes) { used_.fetch_sub(bytes); }
void PhysicalBudget::SetLimit(uint64_t bytes) { limit_.store(bytes); }
uint64_t PhysicalBudget::used() const { return used_.load(); }
uint64_t PhysicalBudget::limit() const { return limit_.load(); }

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class ElasticPoolImpl final : public ElasticPool {
 public:
  ElasticPoolImpl(std::unique_ptr<PageBackend> backend, ElasticPoolOptions options, std::byte* base)
      : backend_(std::move(backend)),
        options_(std::move(options)),
        page_(backend_->page_bytes()),
        blocks_per_page_(static_cast<uint32_t>(page_ / options_.block_bytes)),
        base_(base),
        pages_(options_.reserve_bytes / page_),
        limit_(options_.limit_bytes),
        mapper_([this] { MapperLoop(); }) {}

  ~ElasticPoolImpl() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    mapper_.join();
    for (uint64_t i = 0; i < pages_.size(); ++i) {
      if (pages_[i].state != PageState::kUnmapped) {
        (void)backend_->Unmap(base_, i);
        if (options_.budget) options_.budget->Give(page_);
      }
    }
    backend_->Release(base_, pages_.size() * page_);
  }

  Result<std::vector<BlockId>> Allocate(size_t n, std::chrono::milliseconds wait) override {
    if (n == 0) return std::vector<BlockId>();
    const auto deadline = std::chrono::steady_clock::now() + wait;
    std::unique_lock lock(mu_);
    if (free_mapped_ < n) {
      // The slow path: ask the mapping thread for pages and wait (it never maps under mu_).
      demand_ += n;
      work_cv_.notify_one();
      const bool got = ready_cv_.wait_until(lock, deadline, [&] {
        return free_mapped_ >= n || stopping_ || !CanGrowLocked(n - free_mapped_);
      });
      demand_ -= n;
      if (!got || free_mapped_ < n) {
        return ResourceExhaustedError(
            "pool " + options_.name + ": " + std::to_string(n) + " blocks of " +
            std::to_string(options_.block_bytes) + " bytes do not fit (limit " +
            std::to_string(limit_) + " bytes, " + std::to_string(mapped_pages_) + " pages mapped" +
            (options_.budget ? ", shared budget " + std::to_string(options_.budget->used()) + "/" +
                                   std::to_string(options_.budget->limit()) + " bytes used"
                             : std::string()) +
            ")");
      }
    }
    // The fast path: blocks from the lowest mapped pages first, so high pages empty out and
    // can be unmapped.
    std::vector<BlockId> out;
    out.reserve(n);
    while (out.size() < n) {
      const uint64_t page = *with_free_.begin();
      Page& p = pages_[page];
      while (out.size() < n && !p.free.empty()) {
        out.push_back(static_cast<BlockId>(page * blocks_per_page_ + p.free.back()));
        p.free.pop_back();
      }
      if (p.free.empty()) with_free_.erase(with_free_.begin());
    }
    free_mapped_ -= n;
    used_ += n;
    if (free_mapped_ < LowWaterLocked()) work_cv_.notify_one();  // map ahead
    return out;
  }

  void Free(std::span<const BlockId> blocks) override {
    bool spare_changed = false;
    {
      std::lock_guard lock(mu_);
      for (BlockId b : blocks) {
        const uint64_t page = b / blocks_per_page_;
        Page& p = pages_[page];
        p.free.push_back(static_cast<uint32_t>(b % blocks_per_page_));
        with_free_.insert(page);
        spare_changed |= p.free.size() == blocks_per_page_;
      }
      free_mapped_ += blocks.size();
      used_ -= blocks.size();
    }
    if (spare_changed) work_cv_.notify_one();
    ready_cv_.notify_all();
  }

  std::byte* Address(BlockId block) const override {
    return base_ + static_cast<uint64_t>(block) * options_.block_bytes;
  }

  void SetLimit(uint64_t bytes) override {
    {
      std::lock_guard lock(mu_);
      limit_ = bytes;
      grow_blocked_ = false;
    }
    work_cv_.notify_one();
    ready_cv_.notify_all();
  }

  void Settle() override {
    std::unique_lock lock(mu_);
    settle_cv_.wait(lock, [&] { return (!busy_ && !HasWorkLocked()) || stopping_; });
  }

  ElasticPoolStats Stats() const override {
    std::lock_guard lock(mu_);
    return ElasticPoolStats{.mapped_pages = mapped_pages_,
                            .used_blocks = used_,
                            .free_mapped_blocks = free_mapped_,
                            .maps = maps_,
                            .unmaps = unmaps_,
                            .map_seconds = map_seconds_,
                            .unmap_seconds = unmap_seconds_,
                            .limit_bytes = limit_};
  }

  uint64_t block_bytes() const override { return options_.block_bytes; }
  uint64_t page_bytes() const override { return page_; }
  PageBackend& backend() override { return *backend_; }

 private:
  enum class PageState { kUnmapped, kMapping, kMapped, kUnmapping };
  struct Page {
    PageState state = PageState::kUnmapped;
    std::vector<uint32_t> free;  // free block slots, when mapped
  };

  uint64_t LowWaterLocked() const { return uint64_t{options_.min_spare_pages} * blocks_per_page_; }

  // Whether `more` blocks could still come from mapping pages (limit, budget, reservation).
  bool CanGrowLocked(uint64_t more) const {
    if (grow_blocked_) return false;
    const uint64_t coming = mapping_pages_ * blocks_per_page_;  // pages being mapped now
    if (more <= coming) return true;
    const uint64_t pages = (more - coming + blocks_per_page_ - 1) / blocks_per_page_;
    if ((mapped_pages_ + pages) * page_ > limit_) return false;
    if (mapped_pages_ + pages > pages_.size()) return false;
    if (options_.budget && options_.budget->used() + pages * page_ > options_.budget->limit()) {
      return false;
    }
    return true;
  }

  uint64_t WantFreeLocked() const { return demand_ + LowWaterLocked(); }

  // Wholly free mapped pages, highest first.
  std::vector<uint64_t> SparePagesLocked() const {
    std::vector<uint64_t> out;
    for (auto it = with_free_.rbegin(); it != with_free_.rend(); ++it) {
      if (pages_[*it].free.size() == blocks_per_page_) out.push_back(*it);
    }
    return out;
  }

  bool ShouldMapLocked() const {
    return !grow_blocked_ && free_mapped_ < WantFreeLocked() &&
           (mapped_pages_ + 1) * page_ <= limit_ && mapped_pages_ < pages_.size() &&
           (!options_.budget || options_.budget->used() + page_ <= options_.budget->limit());
  }

  bool ShouldUnmapLocked() const {
    const size_t spare = SparePagesLocked().size();
    if (spare == 0) return false;
    if (mapped_pages_ * page_ > limit_) return true;  // over a lowered limit
    if (demand_ > 0) return false;
    // Keep the band [min, max] of spares; above max, unmap down to it.
    return spare > options_.max_spare_pages && free_mapped_ - blocks_per_page_ >= LowWaterLocked();
  }

  bool HasWorkLocked() const { return ShouldMapLocked() || ShouldUnmapLocked(); }

  // Runs a backend call with mu_ released and busy_ set meanwhile; its status and seconds.
  template <typename Call>
  std::pair<Status, double> CallBackendUnlocked(std::unique_lock<std::mutex>& lock, Call call) {
    busy_ = true;
    lock.unlock();
    const double t0 = Now();
    Status s = call();
    const double seconds = Now() - t0;
    lock.lock();
    busy_ = false;
    return {std::move(s), seconds};
  }

  void MapperLoop() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || HasWorkLocked(); });
      if (stopping_) break;
      if (ShouldMapLocked()) {
        // The lowest unmapped page.
        uint64_t page = 0;
        while (pages_[page].state != PageState::kUnmapped) ++page;
        if (options_.budget && !options_.budget->TryTake(page_)) {
          ready_cv_.notify_all();  // waiters re-check CanGrow
          settle_cv_.notify_all();
          work_cv_.wait_for(lock, std::chrono::milliseconds(10));
          continue;
        }
        pages_[page].state = PageState::kMapping;
        mapped_pages_++;
        mapping_pages_++;
        const auto [s, t] = CallBackendUnlocked(lock, [&] { return backend_->Map(base_, page); });
        mapping_pages_--;
        if (!s.ok()) {
          pages_[page].state = PageState::kUnmapped;
          mapped_pages_--;
          if (options_.budget) options_.budget->Give(page_);
          map_error_ = s;
          grow_blocked_ = true;  // allocations beyond what is mapped fail until SetLimit
          ready_cv_.notify_all();
        } else {
          Page& p = pages_[page];
          p.state = PageState::kMapped;
          p.free.resize(blocks_per_page_);
          for (uint32_t i = 0; i < blocks_per_page_; ++i) p.free[i] = blocks_per_page_ - 1 - i;
          with_free_.insert(page);
          free_mapped_ += blocks_per_page_;
          maps_++;
          map_seconds_ += t;
        }
      } else if (ShouldUnmapLocked()) {
        const uint64_t page = SparePagesLocked().front();  // the highest
        Page& p = pages_[page];
        p.state = PageState::kUnmapping;
        p.free.clear();
        with_free_.erase(page);
        free_mapped_ -= blocks_per_page_;
        const auto [s, t] = CallBackendUnlocked(lock, [&] { return backend_->Unmap(base_, page); });
        p.state = PageState::kUnmapped;
        mapped_pages_--;
        if (options_.budget) options_.budget->Give(page_);
        unmaps_++;
        unmap_seconds_ += t;
        if (!s.ok()) map_error_ = s;
      }
      ready_cv_.notify_all();
      settle_cv_.notify_all();
    }
    settle_cv_.notify_all();
    ready_cv_.notify_all();
  }

  const std::unique_ptr<PageBackend> backend_;
  const ElasticPoolOptions options_;
  const uint64_t page_;
  const uint32_t blocks_per_page_;
  std::byte* const base_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_, settle_cv_;
  std::vector<Page> pages_;                     // guarded by mu_
  std::set<uint64_t> with_free_;                // guarded by mu_: mapped pages with a free block
  uint64_t free_mapped_ = 0;                    // guarded by mu_
  uint64_t used_ = 0;                           // guarded by mu_
  uint64_t mapped_pages_ = 0;                   // guarded by mu_: includes pages being mapped
  uint64_t mapping_pages_ = 0;                  // guarded by mu_: pages being mapped
  uint64_t demand_ = 0;                         // guarded by mu_: blocks waiting allocations want
  uint64_t limit_;                              // guarded by mu_
  uint64_t maps_ = 0, unmaps_ = 0;              // guarded by mu_
  double map_seconds_ = 0, unmap_seconds_ = 0;  // guarded by mu_
  Status map_error_;                            // guarded by mu_: the last failed page operation
  bool grow_blocked_ = false;                   // guarded by mu_: a map failed; cleared by SetLimit
  bool busy_ = false;                           // guarded by mu_: a page operation is in flight
  bool stopping_ = false;                       // guarded by mu_
  std::thread mapper_;                          // last: starts after everything it uses
};

}  // namespace

Result<std::unique_ptr<ElasticPool>> ElasticPool::Create(std::unique_ptr<PageBackend> backend,
                                                         ElasticPoolOptions options) {
  if (!backend) return InvalidArgumentError("no page backend");
  const uint64_t page = backend->page_bytes();
  if (options.block_bytes == 0 || page % options.block_bytes != 0) {
    return InvalidArgumentError("the block size (" + std::to_string(options.block_bytes) +
                                ") must divide the page size (" + std::to_string(page) + ")");
  }
  if (page / options.block_bytes > (uint64_t{1} << 20)) {
    return InvalidArgumentError("too many blocks per page");
  }
  if (options.reserve_bytes < page) return InvalidArgumentError("reserve at least one page");
  options.reserve_bytes -= options.reserve_bytes % page;
  if (options.reserve_bytes / options.block_bytes > UINT32_MAX) {
    return InvalidArgumentError("the reservation holds more blocks than block ids can name");
  }
  if (options.min_spare_pages > options.max_spare_pages) {
    return InvalidArgumentError("min_spare_pages exceeds max_spare_pages");
  }
  OC_ASSIGN_OR_RETURN(std::byte * base, backend->Reserve(options.reserve_bytes));
  return std::unique_ptr<ElasticPool>(
      new ElasticPoolImpl(std::move(backend), std::move(options), base));
}

}  // namespace objectcache
