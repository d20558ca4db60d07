// Opening a store from a URI.
//
//   mem://                       an empty in-memory store (tests, hot tier)
//   file:///abs/path[?opts]      the local directory store; a bare path means the same
//     opts: capacity=BYTES (suffixes K, M, G, T, KiB, MiB, GiB, TiB), durable=true|false,
//           open_files=N (files kept open for recent reads, default 4096)
//
// Later backends (rados://, s3://) register here too. OpenStore is thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "objectcache/status.h"
#include "objectcache/store.h"

namespace objectcache {

// The local store in ./objectcache-data, the default of every command.
inline constexpr std::string_view kDefaultStoreUri = "file://./objectcache-data";

// InvalidArgument for a malformed URI or an unknown scheme; the backend's own error (for
// example FailedPrecondition when another process holds a local store) otherwise.
Result<std::unique_ptr<Store>> OpenStore(std::string_view uri);

// "10GiB" -> 10737418240. InvalidArgument on anything else.
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace objectcache
