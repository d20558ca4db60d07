// The local store (local_store.h opens it): its class and the layout constants its two halves
// share. local_store.cc holds the data path (puts, reads, lookups, eviction, listing);
// local_store_open.cc holds opening, the index file at open and close, and the rebuild from the
// object directories after a crash.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "core/byte_order.h"
#include "core/hex.h"
#include "core/xxh3.h"
#include "store/backend_util.h"
#include "store/local/index.h"
#include "store/local/index_file.h"
#include "store/local/local_store.h"
#include "store/local/object_file.h"
#include "store/local/posix_io.h"

namespace objectcache::local {

inline constexpr std::string_view kFormatFile = "FORMAT";
inline constexpr std::string_view kFormatText = "objectcache local store v1\n";
inline constexpr size_t kDirShards = 256;
inline constexpr size_t kIndexShards = 64;

inline size_t DirShardOf(std::string_view key) { return KeyHash(key) & (kDirShards - 1); }
inline size_t IndexShardOfHash(uint64_t hash) { return (hash >> 8) % kIndexShards; }
inline size_t IndexShardOf(std::string_view key) { return IndexShardOfHash(KeyHash(key)); }

// Runs fn(0) .. fn(n - 1) on `threads` threads.
template <typename F>
void ParallelFor(size_t n, unsigned threads, F fn) {
  std::atomic<size_t> next{0};
  std::vector<std::jthread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
}

class LocalStore final : public Store {
 public:
  LocalStore(LocalStoreOptions options, Fd root, Fd lock, Fd tmp_dir,
             std::array<Fd, kDirShards> dirs)
      : options_(std::move(options)),
        root_(std::move(root)),
        lock_(std::move(lock)),
        tmp_dir_(std::move(tmp_dir)),
        dirs_(std::move(dirs)),
        open_files_per_shard_(options_.max_open_files / kIndexShards) {}

  StoreCapabilities Capabilities() const override {
    return {.ranged_reads = true,
            .persistent = true,
            .evicts = capacity().has_value(),
            .capacity_bytes = capacity(),
            .conditional_put = true,
            .file_extents = true};
  }

  StoreUsage Usage() const override {
    return {.objects = objects_.load(), .bytes = bytes_.load(), .evictions = evictions_.load()};
  }

  std::string Uri() const override { return "file://" + options_.root; }

  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& put_options) override;
  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& put_options) override;
  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) override;
  Result<std::unique_ptr<ObjectReader>> OpenReaderIfCached(std::string_view key) override;

  // Moves a finished temporary file into place and indexes it (LocalObjectWriter::Commit).
  // With `if_absent`, an existing name fails the install with AlreadyExists; with
  // `if_attributes`, an absent name or other attributes fail it (MatchAttributes). Then the
  // temporary file is removed; the check and the rename happen under the shard lock.
  Status Install(const std::string& key, const std::string& temp_name, uint64_t size, bool durable,
                 bool if_absent, const std::optional<std::string>& if_attributes);
  int tmp_dir() const { return tmp_dir_.get(); }
  // The most one object file may take: the store's capacity or the shared one, the smaller.
  std::optional<uint64_t> capacity() const {
    std::optional<uint64_t> cap = options_.capacity_bytes;
    if (const auto& shared = options_.shared_capacity) {
      cap = std::min(cap.value_or(UINT64_MAX), shared->limit);
    }
    return cap;
  }
  Result<ObjectInfo> Stat(std::string_view key) override;
  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override;
  Status RetrieveRanges(std::span<RangeRead> reads) override;
  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override;
  Status Delete(std::string_view key) override;
  Status DeleteIf(std::string_view key, std::string_view attributes) override;
  Result<ListPage> List(const ListOptions& options) override;
  Status Pin(std::string_view key, int64_t until) override;

  // Fills index shard `shard` with the objects found on disk at open. Their recency is their
  // modification time, so shards can be built in parallel and still agree on a global order.
  Status RebuildIndexShard(size_t shard, std::vector<FoundObject>* found) {
    IndexShard& s = index_[shard];
    std::lock_guard lock(s.mu);
    s.objects.BeginLoading(found->size());
    Status status;
    for (const FoundObject& f : *found) {
      status = AddLoaded(s, f.key, f.size, f.stamp, f.pinned_until);
      if (!status.ok()) break;
    }
    s.objects.FinishLoading();
    *found = {};
    return status;
  }
  // Fills the index from the index file (index_file.h), or leaves it empty and says why not.
  Status LoadIndexFile(unsigned threads);
  int dir(size_t i) const { return dirs_[i].get(); }
  // The index is whole: from now on the store writes the index file when it closes.
  void Opened() { opened_ = true; }
  ~LocalStore() override;
  void EvictToCapacity();

 private:
  // Runs fn(shard, id) on `key`'s index entry with its shard locked. An invalid key fails as
  // ValidateKey says; a key the index does not hold, with NotFound "VERB 'KEY': no such object".
  template <typename Fn>
  std::invoke_result_t<Fn, IndexShard&, EntryId> WithIndexEntry(std::string_view key,
                                                                std::string_view verb, Fn fn) {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    IndexShard& s = index_[IndexShardOf(key)];
    std::lock_guard lock(s.mu);
    const EntryId id = s.Find(key);
    if (id == kNoEntry) return NotFoundError(Doing(verb, key) + ": no such object");
    return fn(s, id);
  }
  // "VERB 'KEY'", or "'KEY'" without a verb: what an error says was being done.
  static std::string Doing(std::string_view verb, std::string_view key) {
    std::string what(verb);
    if (!what.empty()) what += ' ';
    return what + "'" + std::string(key) + "'";
  }
  // An object read at open joins the index of shard `s` (loading: IndexShard::BeginLoading).
  Status AddLoaded(IndexShard& s, std::string_view key, uint64_t size, uint64_t stamp,
                   int64_t pinned_until) {
    if (!s.objects.HasRoomFor(key)) {
      return ResourceExhaustedError("the index has no room for more objects");
    }
    stamp = std::min(stamp, ObjectIndex::kMaxStamp);  // a file dated past the year 4253
    auto [id, inserted] = s.objects.Insert(key, KeyHash(key));
    if (!inserted) return Status();
    s.objects.set_size(id, size);
    s.objects.set_stamp(id, stamp);
    if (pinned_until != 0) s.objects.set_pinned_until(id, pinned_until);
    objects_++;
    Count(key, size);
    uint64_t clock = clock_.load();
    while (stamp >= clock && !clock_.compare_exchange_weak(clock, stamp + 1)) {
    }
    return Status();
  }
  // Drops object `key`, entry `id` of shard `s`, from the index and the totals (its file is
  // gone). REQUIRES: s.mu held.
  void Forget(IndexShard& s, std::string_view key, EntryId id) {
    Uncount(key, s.objects.size(id));
    objects_--;
    s.objects.Erase(id);
  }
  // Empties the index (an index file found damaged part way).
  void ClearIndex() {
    if (options_.shared_capacity) options_.shared_capacity->used -= footprint_.load();
    for (IndexShard& s : index_) s.objects.Clear();
    objects_ = bytes_ = footprint_ = records_footprint_ = 0;
    clock_ = 0;
  }
  std::array<int, kDirShards> DirFds() const {
    std::array<int, kDirShards> fds;
    for (size_t i = 0; i < kDirShards; ++i) fds[i] = dirs_[i].get();
    return fds;
  }
  // Room for a new file of `footprint` bytes named `key`: records stay within the store's
  // capacity (eviction never frees them), and the shared capacity is taken for it, evicting
  // this store's least recently used objects while it does not fit.
  Status MakeRoom(const std::string& key, uint64_t footprint);
  // Evicts the least recently used object, or moves a pinned one to the front (counted in
  // `pinned_seen`); false when there is nothing to evict. REQUIRES: evict_mu_ held.
  bool EvictOldest(uint64_t* pinned_seen);
  bool OverCapacity() const {
    const auto& shared = options_.shared_capacity;
    return (options_.capacity_bytes && footprint_.load() > *options_.capacity_bytes) ||
           (shared && shared->used.load() > shared->limit);
  }
  int DirFor(std::string_view key) const { return dirs_[DirShardOf(key)].get(); }
  Result<OpenObjectRef> OpenForRead(std::string_view key);
  // OK when object `key` exists with exactly `attributes`: NotFound when absent,
  // FailedPrecondition when they differ. REQUIRES: the key's index shard lock is held.
  Status MatchAttributes(const IndexShard& s, std::string_view key, std::string_view attributes,
                         const std::string& what) const;
  // Delete, or DeleteIf when `attributes` is set.
  Status DeleteMatching(std::string_view key, std::optional<std::string_view> attributes);
  // Drops an object whose file failed a check, unless it was replaced meanwhile.
  Status DropDamaged(std::string_view key, ino_t inode, const Status& why);
  // An object of `size` payload bytes named `key` joins or leaves the totals; `taken`: its
  // footprint is already taken from the shared capacity (MakeRoom).
  void Count(std::string_view key, uint64_t size, bool taken = false) {
    const uint64_t footprint = ObjectFileFootprint(size, key.size());
    bytes_ += size;
    footprint_ += footprint;
    if (IsRecordName(key)) records_footprint_ += footprint;
    if (options_.shared_capacity && !taken) options_.shared_capacity->used += footprint;
  }
  void Uncount(std::string_view key, uint64_t size) {
    const uint64_t footprint = ObjectFileFootprint(size, key.size());
    bytes_ -= size;
    footprint_ -= footprint;
    if (IsRecordName(key)) records_footprint_ -= footprint;
    if (options_.shared_capacity) options_.shared_capacity->used -= footprint;
  }

  const LocalStoreOptions options_;
  Fd root_;
  Fd lock_;  // holds the flock for the life of the store
  Fd tmp_dir_;
  std::array<Fd, kDirShards> dirs_;
  std::array<IndexShard, kIndexShards> index_;
  std::atomic<uint64_t> clock_{0};
  std::atomic<uint64_t> next_temp_{0};
  std::atomic<uint64_t> objects_{0};
  std::atomic<uint64_t> bytes_{0};              // payloads
  std::atomic<uint64_t> footprint_{0};          // their files, in blocks (what the capacity bounds)
  std::atomic<uint64_t> records_footprint_{0};  // of which records
  std::atomic<uint64_t> evictions_{0};
  std::mutex evict_mu_;  // one evictor at a time; never taken on the read path
  const size_t open_files_per_shard_;
  bool opened_ = false;
};

}  // namespace objectcache::local
