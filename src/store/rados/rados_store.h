// RadosStore: objects in a Ceph RADOS pool, through librados (rados://).
//
//   rados://POOL?conf=PATH&namespace=NS&id=USER&timeout=SECONDS
//               &capacity=BYTES&atime_resolution=SECONDS&evict_interval_ms=MS
//
// One RADOS object per store object, named by the key, in RADOS namespace NS (one tenant per
// namespace; default: the empty namespace). The value is the object's data and the attributes
// are one xattr, written together by one write operation: RADOS applies an operation on one
// object atomically, so readers see all of a new value or none of it. Reads of many ranges of
// many objects go out at once as asynchronous operations, one per object (an object's ranges
// and its size in one operation, so they come from one version).
//
// Limits and costs (docs/ceph.md):
// - A value is written in one operation, so it is at most 90 MiB (Ceph's osd_max_write_size).
// - List enumerates the namespace and sorts the names: O(objects in the namespace) per page.
// - Readers are not pinned: a read after the object changed fails with Aborted (the read asserts
//   the version seen at open), never returns another version's bytes.
// - Usage() is tracked only with a capacity (rados_capacity.h: usage shared by every gateway
//   over the namespace, access times, a sampled LRU evictor); zeros otherwise.
// - Every operation gives up after `timeout` seconds (default 30) with Unavailable, so a dead
//   OSD yields an error, not a hang; librados reconnects by itself when the OSD is back.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "objectcache/store.h"

namespace objectcache {

inline constexpr uint64_t kMaxRadosObjectBytes = 90ull << 20;

struct RadosStoreOptions {
  std::string pool;
  std::string conf_path;  // empty: librados's default search (CEPH_CONF, /etc/ceph/ceph.conf)
  std::string ns;         // RADOS namespace
  std::string user = "admin";
  int timeout_seconds = 30;
  // Keep the namespace under this many bytes (rados_capacity.h): usage tracked, LRU evicted.
  std::optional<uint64_t> capacity_bytes;
  int64_t atime_resolution_s = 60;
  int evict_interval_ms = 1000;
};

// True when this build has the RADOS backend (librados was found).
bool RadosStoreAvailable();

// Connects to the cluster and opens the pool. NotFound when the pool does not exist,
// Unavailable when the cluster cannot be reached in time, Unimplemented without librados.
Result<std::unique_ptr<Store>> OpenRadosStore(const RadosStoreOptions& options);

// Parses a rados:// URI (above) and opens it.
Result<std::unique_ptr<Store>> OpenRadosUri(std::string_view uri);

// What `rados bench seq` measures, on objects of the caller's choosing: `names` read whole, in
// order, `in_flight` reads outstanding at a time, through librados alone (each into a buffer of
// librados's, nothing copied out or verified). For `bench backends`: the rate at which the
// cluster delivers these objects, which no gateway over it can pass.
struct RadosSequentialRead {
  uint64_t bytes = 0;
  double seconds = 0;
};
// `store` must be a RADOS store (OpenRadosStore, OpenRadosUri); InvalidArgument otherwise.
Result<RadosSequentialRead> ReadRadosObjectsSequentially(Store& store,
                                                         std::span<const std::string> names,
                                                         int in_flight);

}  // namespace objectcache
