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

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "objectcache/status.h"
#include "objectcache/store.h"

namespace objectcache {

// The local store in ./objectcache-data, the default of every command.
inline constexpr std::string_view kDefaultStoreUri = "file://./objectcache-data";

// InvalidArgument for a malformed URI or an unknown scheme; the backend's own error (for
// example FailedPrecondition when another process holds a local store, Unavailable when an
// s3:// bucket cannot be reached) otherwise. The store is open and usable when OK.
Result<std::unique_ptr<Store>> OpenStore(std::string_view uri);

// Adds a URI scheme ("s3") served by `open`, which gets the whole URI. Drivers above the store
// (src/store/s3) register themselves this way. REQUIRES: `scheme` is none of the built-in ones
// (mem, file, rados); registering a scheme again replaces its opener. Thread-safe.
using StoreOpener = std::function<Result<std::unique_ptr<Store>>(std::string_view uri)>;
void RegisterStoreScheme(const std::string& scheme, StoreOpener open);

// "10GiB" -> 10737418240. InvalidArgument on anything else.
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace objectcache
