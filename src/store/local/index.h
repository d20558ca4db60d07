// The local store's in-memory index (local_store.h): per shard, the objects (object_index.h:
// names, sizes, recency, pins) and the files of recently read objects kept open. Plain data; the
// store takes each shard's lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "objectcache/store.h"
#include "store/local/object_index.h"
#include "store/local/posix_io.h"

namespace objectcache::local {

// The xattr of an object file that holds its pin (Store::Pin): decimal seconds since the epoch.
inline constexpr char kPinXattr[] = "user.objectcache.pin";

// An object found on disk at open.
struct FoundObject {
  std::string key;
  uint64_t size = 0;
  uint64_t stamp = 0;  // modification time, microseconds
  int64_t pinned_until = 0;
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

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

struct IndexShard {
  std::mutex mu;
  // The shard's objects (object_index.h); guarded by mu.
  ObjectIndex objects;
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

  EntryId Find(std::string_view key) const { return objects.Find(key, KeyHash(key)); }
  bool Contains(std::string_view key) const { return Find(key) != kNoEntry; }
};

}  // namespace objectcache::local
