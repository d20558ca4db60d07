// The index file: the local store's index written at a clean close (ROOT/INDEX) and read at
// the next open in place of the directories, which at 10^7 objects take a minute to read
// (docs/local-store.md, "Rebuild"; the format is there too).
//
// It is used only when it is whole (its checksum) and current: it records the modification
// time of every object directory, and an object written, renamed or removed since (by this
// store after a crash, by an older build, by hand) changes one of them, so the open reads the
// directories instead. The open removes it, durably, before the store takes a write, so a
// crash later never finds a stale one.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "objectcache/status.h"
#include "store/local/index.h"

namespace objectcache::local {

inline constexpr char kIndexFileName[] = "INDEX";

// Writes the objects of `shards` to ROOT/INDEX (through INDEX.tmp, synced), with the
// modification times of `dirs`, the object directories. Takes each shard's lock in turn.
Status WriteIndexFile(int root, std::span<IndexShard> shards, std::span<const int> dirs);

// One object of the file: name, payload size, recency stamp, pin.
using IndexFileVisitor =
    std::function<Status(std::string_view key, uint64_t size, uint64_t stamp, int64_t pin)>;

// Reads ROOT/INDEX, calling `visit` for each object in turn, then removes the file. NotFound
// when there is none; FailedPrecondition when an object directory changed since it was
// written; DataLoss when it is damaged (the visitor may have seen part of it). The file is
// removed in every case but NotFound. `objects` receives the count the header states, before
// the first visit.
Status ReadIndexFile(int root, std::span<const int> dirs,
                     const std::function<void(uint64_t)>& objects, const IndexFileVisitor& visit);

}  // namespace objectcache::local
