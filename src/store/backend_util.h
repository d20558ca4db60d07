// Pieces every Store backend needs the same way: range checks, serving a batch of range reads
// from one version per object, and merging sharded listings into one page.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/store.h"

namespace objectcache {

// OK when [r.offset, r.offset + r.dest.size()) lies inside an object of `object_size` bytes,
// OutOfRange naming the key otherwise.
Status CheckRange(const RangeRead& r, uint64_t object_size);

// Serves `reads`, opening each distinct key once so that all its ranges come from one version:
// open(key) -> Result<H>; size(const H&) -> payload bytes; read(const H&, RangeRead&) -> Status.
template <typename Open, typename Size, typename Read>
void ServeRangeReads(std::span<RangeRead> reads, Open open, Size size, Read read) {
  using Handle = decltype(open(std::string_view()));
  std::map<std::string_view, Handle> opened;
  for (RangeRead& r : reads) {
    auto it = opened.find(r.key);
    if (it == opened.end()) it = opened.emplace(r.key, open(r.key)).first;
    if (!it->second.has_value()) {
      r.status = it->second.error();
      continue;
    }
    r.status = CheckRange(r, size(*it->second));
    if (r.status.ok()) r.status = read(*it->second, r);
  }
}

// Adds to `out` the names of one ordered shard that could be on the page `options` asks for
// (at most max_keys + 1 of them). size_of(mapped value) -> bytes.
template <typename OrderedMap, typename SizeOf>
void CollectListCandidates(const OrderedMap& shard, const ListOptions& options, SizeOf size_of,
                           std::vector<ObjectInfo>* out) {
  const bool after = options.start_after >= options.prefix;
  const std::string& from = after ? options.start_after : options.prefix;
  auto it = after ? shard.upper_bound(from) : shard.lower_bound(from);
  for (size_t n = 0; it != shard.end() && n <= options.max_keys; ++it, ++n) {
    if (!it->first.starts_with(options.prefix)) break;
    out->push_back({it->first, size_of(it->second)});
  }
}

// A writer that collects the value in memory and stores it with one store->Put at Commit: for
// backends whose writes are one request (memory, plain S3, RADOS). `store` must outlive it.
// Appends past `max_bytes` fail with ResourceExhausted (nothing is stored).
std::unique_ptr<ObjectWriter> NewBufferedWriter(Store* store, std::string key, PutOptions options,
                                                uint64_t max_bytes = UINT64_MAX);

// The page made of the candidates of all shards.
ListPage FinishListPage(std::vector<ObjectInfo> candidates, size_t max_keys);

}  // namespace objectcache
