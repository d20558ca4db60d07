// The local store's in-memory index (local_store.h): per shard, the objects' names, sizes and
// recency (an LRU list, with records on a list of their own that eviction never reads), and the
// files of recently read objects kept open. Plain data; the store takes each shard's lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include <xxhash.h>

#include "objectcache/store.h"
#include "store/local/name_set.h"
#include "store/local/posix_io.h"

namespace objectcache::local {

// The xattr of an object file that holds its pin (Store::Pin): decimal seconds since the epoch.
inline constexpr char kPinXattr[] = "user.objectcache.pin";

// An object found on disk at open.
struct FoundObject {
  std::string key;
  uint64_t size = 0;
  uint64_t stamp = 0;  // modification time, ns
  int64_t pinned_until = 0;
};

struct Entry {
  uint64_t size = 0;
  uint64_t stamp = 0;        // recency: larger is more recent
  int64_t pinned_until = 0;  // not evicted before this time (seconds since the epoch)
  Entry* prev = nullptr;
  Entry* next = nullptr;
  const std::string* key = nullptr;
};

// An object file opened and checked (trailer) once, shared by the reads that follow until the
// object is replaced, deleted or evicted. Reads through an old one still see the old version
// whole: the inode lives while it is open.
struct OpenObject {
  std::string key;
  Fd fd;
  ino_t inode = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  int64_t mtime = 0;
  std::string attributes;
};
using OpenObjectRef = std::shared_ptr<const OpenObject>;

// Reads r.dest from an already range-checked object.
inline Status PreadRange(const OpenObject& obj, const RangeRead& r) {
  if (int e = PreadAll(obj.fd.get(), r.dest, r.offset); e != 0) {
    return e > 0 ? ErrnoError("reading '" + obj.key + "'", e)
                 : DataLossError("reading '" + obj.key + "': file truncated");
  }
  return Status();
}

// The hash of an object name that picks its directory, its index shard and its NameSet slot.
inline uint64_t KeyHash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

struct IndexShard {
  using Objects = std::map<std::string, Entry, std::less<>>;
  std::mutex mu;
  // In name order, for listings; guarded by mu. Insert and erase through Emplace and Erase, which
  // keep `names` in step.
  Objects objects;
  // The same names, hashed: presence and lookups without walking the tree (a batch lookup of
  // 8192 keys spent most of its time comparing names down the tree). Views of the map's keys,
  // which stay put while they are in it; guarded by mu.
  NameSet names;
  Entry lru;      // sentinel, guarded by mu: lru.next is the most recent, lru.prev the least
  Entry records;  // sentinel, guarded by mu: records (IsRecordName), never evicted
  // Open files of recently read objects, bounded; guarded by mu.
  std::unordered_map<std::string, OpenObjectRef, TransparentHash, std::equal_to<>> open_files;
  // Bumped whenever an object of this shard is replaced or removed; guarded by mu. A reader
  // caches a file it opened only if no mutation happened since it looked the object up.
  uint64_t mutations = 0;

  // Called with mu held whenever `key`'s file is replaced or removed.
  void Mutated(std::string_view key) {
    mutations++;
    if (auto it = open_files.find(key); it != open_files.end()) open_files.erase(it);
  }

  bool Contains(std::string_view key) const { return names.Contains(key, KeyHash(key)); }
  // The entry for `key`, made (with Entry::key set) when there was none; true when it was made.
  std::pair<Objects::iterator, bool> Emplace(std::string key) {
    auto [it, inserted] = objects.try_emplace(std::move(key));
    if (inserted) {
      it->second.key = &it->first;
      names.Insert(it->first, KeyHash(it->first));
    }
    return {it, inserted};
  }
  void Erase(Objects::iterator it) {
    names.Erase(it->first, KeyHash(it->first));
    objects.erase(it);
  }

  IndexShard() {
    lru.prev = lru.next = &lru;
    records.prev = records.next = &records;
  }
  void Unlink(Entry* e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
  }
  // Makes `e` the most recent of its list: records have their own, which eviction never reads.
  void PushFront(Entry* e) {
    Entry& list = IsRecordName(*e->key) ? records : lru;
    e->next = list.next;
    e->prev = &list;
    list.next->prev = e;
    list.next = e;
  }
};

}  // namespace objectcache::local
