// LocalStore: the local directory store (file://), the embedded default.
//
// One file per object under ROOT/objects/<2 hex digits>/<name>, written to ROOT/tmp first and
// renamed into place, so a kill -9 at any moment leaves each object absent or whole; a file
// under its final name also ends with a footer (docs/local-store.md) that is checked on every
// read, so a file damaged by a power loss is reported (DataLoss) and dropped, never served.
//
// The index of names, sizes and recency lives in memory, in 64 shards each with its own lock
// (no global lock on the read path). A clean close writes it to ROOT/INDEX and the next open
// reads it back; after a crash (or when that file is stale) the open rebuilds it from the
// directories, in parallel.
// An optional capacity bound evicts whole objects (never records, store.h), least recently used
// first; records are refused past it. A capacity shared with other local stores
// (store_registry.h, SharedCapacity) bounds them together: a write that would pass it evicts
// this store's own objects, or is refused when none are left. Files of recently read objects
// stay open (bounded), so repeated ranged reads cost one pread each.
//
// One process owns a store directory at a time (an flock on ROOT/LOCK); a second Open fails
// with FailedPrecondition. Within that process every method is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "objectcache/store.h"
#include "objectcache/store_registry.h"

namespace objectcache {

struct LocalStoreOptions {
  std::string root;
  // Evict least recently used objects to keep the object files (in blocks) at or below this.
  std::optional<uint64_t> capacity_bytes;
  // A bound on the files of this store and others together.
  std::shared_ptr<SharedCapacity> shared_capacity;
  // Default for PutOptions::durable: fdatasync each object and fsync its directory.
  bool durable = false;
  // Files kept open (and their trailers checked) for objects read recently; 0 disables.
  size_t max_open_files = 4096;
  // Threads used to rebuild the index at open (0: one per core).
  unsigned rebuild_threads = 0;
};

struct LocalStoreOpenStats {
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t removed_temp_files = 0;
  uint64_t removed_damaged_files = 0;
  double seconds = 0;              // the whole open
  double scan_seconds = 0;         // of which reading the directories
  bool index_file = false;         // the index came from the index file, not the directories
  std::string index_file_refused;  // why an index file found was not used
};

// Opens (creating if needed) a store directory and rebuilds its index. `stats`, if given,
// receives what the rebuild found and how long it took.
Result<std::unique_ptr<Store>> OpenLocalStore(const LocalStoreOptions& options,
                                              LocalStoreOpenStats* stats = nullptr);

// The file name (within its shard directory) used for an object name; exposed for tests and
// docs/local-store.md.
std::string LocalStoreFileName(std::string_view key);

}  // namespace objectcache
