// Opening a store from a URI.
//
//   mem://                       an empty in-memory store (tests, hot tier)
//   file:///abs/path[?opts]      the local directory store; a bare path means the same
//     opts: capacity=BYTES (suffixes K, M, G, T, KiB, MiB, GiB, TiB), durable=true|false,
//           open_files=N (files kept open for recent reads, default 4096)
//
//   rados://POOL?conf=PATH&namespace=NS&id=USER&timeout=SECONDS
//                                a pool of a Ceph cluster (src/store/rados/rados_store.h)
//   s3://HOST:PORT/BUCKET        a bucket of any S3 server over plain HTTP, credentials from the
//                                environment (src/store/s3/s3_store.h); only once
//                                RegisterS3Store() has run (the objectcache binary does)
// Drivers above the store (src/store/s3) register their schemes here. OpenStore is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "objectcache/status.h"
#include "objectcache/store.h"

namespace objectcache {

// The local store in ./objectcache-data, the default of every command.
inline constexpr std::string_view kDefaultStoreUri = "file://./objectcache-data";

// A disk capacity shared by several local stores of one process (a server's store and its
// tenants' namespaces, docs/tenants.md): their object files together stay within `limit`
// bytes. A write that would pass it first evicts the writing store's own least recently used
// objects; when that store has none left to evict it is refused (ResourceExhausted).
struct SharedCapacity {
  explicit SharedCapacity(uint64_t limit_bytes) : limit(limit_bytes) {}
  // Takes `bytes` if they fit under the limit.
  bool TryTake(uint64_t bytes) {
    uint64_t now = used.load();
    do {
      if (bytes > limit || now > limit - bytes) return false;
    } while (!used.compare_exchange_weak(now, now + bytes));
    return true;
  }
  const uint64_t limit;
  std::atomic<uint64_t> used{0};  // the member stores' files, in blocks
};

// What the stores opened by one process share.
struct StoreContext {
  std::shared_ptr<SharedCapacity> shared_capacity;  // file:// stores only
};

// InvalidArgument for a malformed URI or an unknown scheme (or a shared capacity for a store
// that is not local); the backend's own error (for example FailedPrecondition when another
// process holds a local store, Unavailable when an s3:// bucket cannot be reached) otherwise.
// The store is open and usable when OK.
Result<std::unique_ptr<Store>> OpenStore(std::string_view uri, const StoreContext& context = {});

// Adds a URI scheme ("s3") served by `open`, which gets the whole URI. Drivers above the store
// (src/store/s3) register themselves this way. REQUIRES: `scheme` is none of the built-in ones
// (mem, file, rados); registering a scheme again replaces its opener. Thread-safe.
using StoreOpener = std::function<Result<std::unique_ptr<Store>>(std::string_view uri)>;
void RegisterStoreScheme(const std::string& scheme, StoreOpener open);

// "10GiB" -> 10737418240. InvalidArgument on anything else.
Result<uint64_t> ParseByteSize(std::string_view text);

// A store's capacity= (and serve --capacity): a byte size above zero.
Result<uint64_t> ParseStoreCapacity(std::string_view text);

}  // namespace objectcache
