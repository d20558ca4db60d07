#include <algorithm>

#include "objectcache/kv_pool.h"

namespace objectcache {

BlockTable::~BlockTable() {
  std::vector<BlockId> held;
  for (size_t i = 0; i < physical_.size(); ++i) {
    if (live_[i]) held.push_back(physical_[i]);
  }
  pool_->Free(held);
}

Result<std::vector<LogicalBlock>> BlockTable::Allocate(size_t n) {
  OC_ASSIGN_OR_RETURN(std::vector<BlockId> blocks, pool_->Allocate(n));
  std::lock_guard lock(mu_);
  std::vector<LogicalBlock> out;
  out.reserve(n);
  for (BlockId b : blocks) {
    LogicalBlock id;
    if (!spare_.empty()) {
      id = spare_.back();
      spare_.pop_back();
    } else {
      id = static_cast<LogicalBlock>(physical_.size());
      physical_.push_back(0);
      live_.push_back(false);
    }
    physical_[id] = b;
    live_[id] = true;
    out.push_back(id);
  }
  return out;
}

void BlockTable::Free(std::span<const LogicalBlock> blocks) {
  std::vector<BlockId> freed;
  {
    std::lock_guard lock(mu_);
    for (LogicalBlock id : blocks) {
      if (id >= live_.size() || !live_[id]) continue;  // not ours, or freed already
      live_[id] = false;
      freed.push_back(physical_[id]);
      spare_.push_back(id);
    }
  }
  pool_->Free(freed);
}

std::byte* BlockTable::Address(LogicalBlock block) const {
  std::lock_guard lock(mu_);
  return pool_->Address(physical_[block]);
}

BlockId BlockTable::Physical(LogicalBlock block) const {
  std::lock_guard lock(mu_);
  return physical_[block];
}

size_t BlockTable::live() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count(live_.begin(), live_.end(), true));
}

Result<size_t> BlockTable::Compact() {
  std::lock_guard lock(mu_);
  // Live blocks, highest physical address first: each moves into the lowest free block when
  // that one lies lower. The pool hands out its lowest free blocks first.
  std::vector<LogicalBlock> order;
  for (LogicalBlock id = 0; id < live_.size(); ++id) {
    if (live_[id]) order.push_back(id);
  }
  std::sort(order.begin(), order.end(),
            [&](LogicalBlock a, LogicalBlock b) { return physical_[a] > physical_[b]; });
  const uint64_t per_page = pool_->page_bytes() / pool_->block_bytes();
  size_t moved = 0;
  for (LogicalBlock id : order) {
    OC_ASSIGN_OR_RETURN(std::vector<BlockId> fresh, pool_->Allocate(1));
    const BlockId from = physical_[id], to = fresh[0];
    if (to / per_page >= from / per_page) {  // no lower page has room: done
      pool_->Free(fresh);
      break;
    }
    OC_RETURN_IF_ERROR(
        pool_->backend().Copy(pool_->Address(to), pool_->Address(from), pool_->block_bytes()));
    physical_[id] = to;
    pool_->Free(std::span(&from, 1));
    moved++;
  }
  return moved;
}

}  // namespace objectcache
