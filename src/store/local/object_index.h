// ObjectIndex: one shard of the local store's in-memory index (docs/local-store.md, "Index"):
// each object's name, size, recency and pin, found by name, listed in name order, evicted in
// least recently used order, at about 50 bytes an object.
//
// Every object is one record in an arena of 256 KiB blocks (no allocation an object): size and
// name length, recency stamp and flags, the links of its recency list, then its name. A name
// that ends in 32 lowercase hex digits (a chunk key: "bucket/<hex>") keeps them as 16 bytes.
// An object's id is its record's place in the arena, in 8-byte words; three tables name
// records by id, 4 bytes each:
//   - a hash table of ids (open addressing, linear probing, at most 70% full, deletion by
//     backward shift) with 5 bits of the name's hash beside each id, so that most probes of
//     other names stop without reading their record;
//   - the ids in name order, for listings: a sorted vector, plus a short sorted vector of the
//     names added since, merged into it when it grows (a deleted object stays in them, marked,
//     until that merge);
//   - the recency lists are the records' own links: objects, and records (names starting with
//     '.', which eviction never reads), most recent first.
// Deleting an object leaves its record in the arena; when a quarter of the arena is such
// garbage, the live records are copied to a new arena in name order and every table renumbered.
// Pins (rare) live in a map beside the arena.
//
// Plain data: the store takes the shard's lock around every call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "objectcache/store.h"

namespace objectcache::local {

// The hash of an object name that picks its directory, its index shard and its index slot.
inline uint64_t KeyHash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

using EntryId = uint32_t;
inline constexpr EntryId kNoEntry = 0;

class ObjectIndex {
 public:
  // The largest payload an index entry holds; larger objects are refused (a file system's own
  // limit is lower: 16 TiB on ext4).
  static constexpr uint64_t kMaxObjectBytes = (uint64_t{1} << 48) - 1;
  // The largest recency stamp (microseconds since the epoch reach it in the year 4253).
  static constexpr uint64_t kMaxStamp = (uint64_t{1} << 56) - 1;

  ObjectIndex();
  ObjectIndex(ObjectIndex&&) = delete;
  ObjectIndex& operator=(ObjectIndex&&) = default;

  // The object named `name`, whose KeyHash is `hash`, or kNoEntry.
  EntryId Find(std::string_view name, uint64_t hash) const;
  bool Contains(std::string_view name, uint64_t hash) const { return Find(name, hash) != kNoEntry; }
  // Asks the CPU to bring in the slot where a lookup of `hash` starts; then, once that slot is
  // in the cache, PrefetchEntry brings in the record it names. A batch of lookups calls both a
  // few names ahead (twice as far for the slot), so that the misses of many names overlap.
  void Prefetch(uint64_t hash) const;
  void PrefetchEntry(uint64_t hash) const;

  // False when the arena has no room left for a new object named `name` (about 2 x 10^7
  // objects a shard): Insert must not be called then.
  bool HasRoomFor(std::string_view name) const;
  // The entry for `name`, made when there was none (size 0, not on a recency list); true when it
  // was made. REQUIRES: the name is valid (ValidateKey) and HasRoomFor(name).
  std::pair<EntryId, bool> Insert(std::string_view name, uint64_t hash);
  // Removes the entry (from its recency list too).
  void Erase(EntryId id);

  uint64_t size(EntryId id) const;
  void set_size(EntryId id, uint64_t size);  // REQUIRES: size <= kMaxObjectBytes
  uint64_t stamp(EntryId id) const;
  int64_t pinned_until(EntryId id) const;
  void set_pinned_until(EntryId id, int64_t until);
  bool is_record(EntryId id) const;
  std::string Name(EntryId id) const;

  // Makes the entry the most recent of its list with recency `stamp` (larger: more recent).
  void Touch(EntryId id, uint64_t stamp);
  // The least recently used object that is not a record, or kNoEntry.
  EntryId LeastRecent() const { return lists_[kObjects].tail; }

  // Adds to `out` the objects a listing page may start with: names after options.start_after
  // (or from options.prefix) that start with options.prefix, at most options.max_keys + 1.
  void CollectListCandidates(const ListOptions& options, std::vector<ObjectInfo>* out);

  // Loading many objects at once (a rebuild): BeginLoading, then Insert and set_size, set the
  // stamp with set_stamp, then FinishLoading, which orders the names and links the recency
  // lists by stamp. `expected` sizes the hash table.
  void BeginLoading(size_t expected);
  // Sets the recency stamp without moving the entry on its list (Touch does both).
  void set_stamp(EntryId id, uint64_t stamp);
  void FinishLoading();

  // Calls fn(id) for every object, in name order.
  template <typename F>
  void ForEachInNameOrder(F fn) {
    MergeRecent();
    for (EntryId id : ordered_) fn(id);
  }

  // Forgets every object.
  void Clear() { *this = ObjectIndex(); }

  size_t size() const { return live_; }
  // Bytes of memory the index holds (the arena's blocks and the tables' capacity).
  size_t MemoryBytes() const;

 private:
  static constexpr unsigned kBlockWordsLog2 = 15;  // 256 KiB blocks
  static constexpr unsigned kIdBits = 27;          // 2^27 words: a 1 GiB arena a shard
  static constexpr uint32_t kIdMask = (uint32_t{1} << kIdBits) - 1;
  static constexpr size_t kHeaderWords = 3;
  enum List { kObjects = 0, kRecords = 1 };
  struct Links {
    EntryId head = kNoEntry;  // most recent
    EntryId tail = kNoEntry;  // least recent
  };

  uint64_t* Record(EntryId id) {
    return blocks_[id >> kBlockWordsLog2].get() + (id & ((1u << kBlockWordsLog2) - 1));
  }
  const uint64_t* Record(EntryId id) const {
    return blocks_[id >> kBlockWordsLog2].get() + (id & ((1u << kBlockWordsLog2) - 1));
  }
  uint64_t Flags(EntryId id) const;
  void SetFlag(EntryId id, uint64_t flag, bool on);
  size_t RecordWords(EntryId id) const;
  // The entry whose stored name is `encoded` (with `flags`' kHexTail), or kNoEntry.
  EntryId FindEncoded(const uint8_t* encoded, size_t encoded_bytes, uint64_t flags,
                      uint64_t hash) const;
  // Appends a record for a name already encoded; kNoEntry when the arena is full.
  EntryId Append(const uint8_t* encoded, size_t encoded_bytes, uint64_t flags);
  // The name written into `buf` (kMaxKeyBytes), as a view of it.
  std::string_view NameInto(EntryId id, char* buf) const;
  uint64_t HashOf(EntryId id) const;
  // Name order of two entries, and of an entry and a name: <0, 0, >0.
  int Compare(EntryId a, EntryId b) const;
  int Compare(EntryId a, std::string_view name) const;

  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> shift_); }
  size_t NextSlot(size_t i) const { return (i + 1) & (slots_.size() - 1); }
  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash & 31) << kIdBits; }
  void PlaceSlot(EntryId id, uint64_t hash);
  void ResizeSlots(size_t capacity);
  void EraseSlot(EntryId id);

  void Link(EntryId id);
  void Unlink(EntryId id);  // does nothing to an entry on no list
  bool IsLinked(EntryId id) const;
  List ListOf(EntryId id) const { return is_record(id) ? kRecords : kObjects; }

  // Folds the recent names into the ordered ones, dropping deleted entries.
  void MergeRecent();
  // Copies the live records into a new arena when a quarter of it is garbage.
  void MaybeCompact();
  void Compact();

  std::vector<std::unique_ptr<uint64_t[]>> blocks_;
  size_t used_words_ = 1;  // word 0 is kNoEntry
  size_t garbage_words_ = 0;
  std::vector<uint32_t> slots_;  // id | tag << kIdBits; 0 is empty
  unsigned shift_ = 64;
  std::vector<EntryId> ordered_;  // in name order (deleted entries until the next merge)
  std::vector<EntryId> recent_;   // added since the last merge, in name order
  size_t dead_in_order_ = 0;      // deleted entries still in ordered_ or recent_
  Links lists_[2];
  std::unordered_map<EntryId, int64_t> pins_;
  size_t live_ = 0;
  bool loading_ = false;
};

}  // namespace objectcache::local
