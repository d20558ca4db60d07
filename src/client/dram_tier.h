// The client's DRAM tier: a bounded LRU of verified chunk objects in this process's memory.
//
// Hits here are copied layer by layer into the caller's regions without the network (the
// Local-DRAM-LW baseline of the TTFT experiment). Objects enter verified (VerifyChunkObject)
// and are immutable while cached: an entry is shared, so eviction never pulls bytes from
// under a copy in progress. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "objectcache/chunk_object.h"
#include "objectcache/store.h"

namespace objectcache::client {

class DramTier {
 public:
  struct Entry {
    std::shared_ptr<const std::string> object;
    ChunkHeader header;
    // Layer `layer`'s slice, verified when the object entered.
    std::span<const std::byte> Slice(uint32_t layer) const {
      return AsBytes(*object).subspan(header.LayerOffset(layer), header.LayerSliceBytes());
    }
  };

  explicit DramTier(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Caches `object` under `key` once it verifies as a chunk object of that key; evicts the
  // least recently used entries to make room. An object larger than the whole tier, or one
  // that fails its check, is not cached (the check's error is returned).
  Status Insert(const ChunkKey& key, std::shared_ptr<const std::string> object);

  // The entries of the longest prefix of `keys` cached with `layout` (null: any layout);
  // refreshes them.
  std::vector<std::shared_ptr<const Entry>> Prefix(std::span<const ChunkKey> keys,
                                                   const KvLayout* layout);

  uint64_t bytes() const;
  uint64_t capacity() const { return capacity_; }

 private:
  struct Slot {
    std::shared_ptr<const Entry> entry;
    std::list<ChunkKey>::iterator lru;
  };
  const uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t bytes_ = 0;                          // guarded by mu_
  std::list<ChunkKey> lru_;                     // guarded by mu_; most recent first
  std::unordered_map<ChunkKey, Slot> entries_;  // guarded by mu_
};

}  // namespace objectcache::client
