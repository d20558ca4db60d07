#include "client/dram_tier.h"

namespace objectcache::client {

Status DramTier::Insert(const ChunkKey& key, std::shared_ptr<const std::string> object) {
  if (object->size() > capacity_) return Status();
  OC_ASSIGN_OR_RETURN(ChunkHeader header, VerifyChunkObject(AsBytes(*object), {.key = &key}));
  auto entry = std::make_shared<Entry>(Entry{std::move(object), std::move(header)});
  const uint64_t size = entry->object->size();
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    bytes_ -= it->second.entry->object->size();
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  while (bytes_ + size > capacity_ && !lru_.empty()) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= victim->second.entry->object->size();
    entries_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_.emplace(key, Slot{std::move(entry), lru_.begin()});
  bytes_ += size;
  return Status();
}

std::vector<std::shared_ptr<const DramTier::Entry>> DramTier::Prefix(std::span<const ChunkKey> keys,
                                                                     const KvLayout* layout) {
  std::vector<std::shared_ptr<const Entry>> out;
  std::lock_guard lock(mu_);
  for (const ChunkKey& key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end() || (layout && it->second.entry->header.layout != *layout)) break;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    out.push_back(it->second.entry);
  }
  return out;
}

uint64_t DramTier::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace objectcache::client
