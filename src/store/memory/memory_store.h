// MemoryStore: objects in process memory (mem://).
//
// For tests and as a hot tier. Objects are immutable shared buffers: a Put swaps the pointer
// under a shard lock, so readers copy from a consistent version without holding any lock while
// they copy. Lost when the process ends. Thread-safe.
#pragma once

#include <memory>

#include "objectcache/store.h"

namespace objectcache {

std::unique_ptr<Store> NewMemoryStore();

}  // namespace objectcache
