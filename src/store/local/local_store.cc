#include "store/local/local_store.h"

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
#include <unordered_map>

#include "core/byte_order.h"
#include "core/hex.h"
#include "core/xxh3.h"
#include "store/backend_util.h"
#include "store/local/index.h"
#include "store/local/index_file.h"
#include "store/local/object_file.h"
#include "store/local/posix_io.h"

namespace objectcache {

using namespace local;  // the store's own pieces: POSIX I/O, the object file, the index

namespace {

constexpr std::string_view kFormatFile = "FORMAT";
constexpr std::string_view kFormatText = "objectcache local store v1\n";
constexpr size_t kDirShards = 256;
constexpr size_t kIndexShards = 64;

size_t DirShardOf(std::string_view key) { return KeyHash(key) & (kDirShards - 1); }
size_t IndexShardOfHash(uint64_t hash) { return (hash >> 8) % kIndexShards; }
size_t IndexShardOf(std::string_view key) { return IndexShardOfHash(KeyHash(key)); }

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

// ---- the store ---------------------------------------------------------------------------

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

LocalStore::~LocalStore() {
  // Best effort: without the file, the next open reads the directories instead.
  if (opened_) (void)WriteIndexFile(root_.get(), index_, DirFds());
  if (options_.shared_capacity) options_.shared_capacity->used -= footprint_.load();
}

Status LocalStore::LoadIndexFile(unsigned threads) {
  Status status = ReadIndexFile(
      root_.get(), DirFds(),
      [&](uint64_t count) {
        for (IndexShard& s : index_) s.objects.BeginLoading(count / kIndexShards * 9 / 8 + 16);
      },
      [&](std::string_view key, uint64_t size, uint64_t stamp, int64_t pin) {
        if (Status valid = ValidateKey(key); !valid.ok()) return DataLossError(valid.message());
        // One thread, before the store is shared: no shard lock needed.
        return AddLoaded(index_[IndexShardOf(key)], key, size, stamp, pin);
      });
  ParallelFor(kIndexShards, threads, [&](size_t shard) { index_[shard].objects.FinishLoading(); });
  if (!status.ok()) ClearIndex();
  return status;
}

// Writes a temporary file, then Commit renames it into place.
class LocalObjectWriter final : public ObjectWriter {
 public:
  LocalObjectWriter(LocalStore* store, std::string key, std::string temp_name, Fd fd, bool durable,
                    bool if_absent, std::optional<std::string> if_attributes,
                    std::string attributes)
      : store_(store),
        key_(std::move(key)),
        temp_name_(std::move(temp_name)),
        fd_(std::move(fd)),
        durable_(durable),
        if_absent_(if_absent),
        if_attributes_(std::move(if_attributes)),
        attributes_(std::move(attributes)) {
    checksum_.Reset();
  }
  ~LocalObjectWriter() override {
    if (!done_) Discard();
  }

  Status Append(std::span<const std::byte> bytes) override {
    if (done_) return FailedPreconditionError("storing '" + key_ + "': writer already closed");
    if (std::optional<uint64_t> cap = store_->capacity();
        cap && ObjectFileFootprint(written_ + bytes.size(), key_.size()) > *cap) {
      Discard();
      return ResourceExhaustedError("storing '" + key_ +
                                    "': object exceeds the store capacity of " +
                                    std::to_string(*cap) + " bytes");
    }
    if (int e = WriteAll(fd_.get(), reinterpret_cast<const char*>(bytes.data()), bytes.size())) {
      Discard();
      return ErrnoError("storing '" + key_ + "': writing", e);
    }
    checksum_.Update(bytes.data(), bytes.size());
    written_ += bytes.size();
    return Status();
  }

  Status SetAttributes(std::string attributes) override {
    OC_RETURN_IF_ERROR(ValidateAttributes(attributes));
    attributes_ = std::move(attributes);
    return Status();
  }

  Status Commit() override {
    if (done_) return FailedPreconditionError("storing '" + key_ + "': writer already closed");
    const std::string what = "storing '" + key_ + "'";
    const std::string trailer = MakeTrailer(key_, written_, checksum_.Digest());
    int err = WriteAll(fd_.get(), trailer.data(), trailer.size());
    if (err == 0 && !attributes_.empty()) err = WriteAttributesXattr(fd_.get(), key_, attributes_);
    if (err == 0 && durable_ && ::fdatasync(fd_.get()) != 0) err = errno;
    if (int close_err = fd_.Close(); err == 0) err = close_err;
    if (err != 0) {
      Discard();
      return ErrnoError(what + ": writing", err);
    }
    done_ = true;
    return store_->Install(key_, temp_name_, written_, durable_, if_absent_, if_attributes_);
  }

  uint64_t bytes_written() const override { return written_; }

 private:
  void Discard() {
    done_ = true;
    fd_.Reset();
    ::unlinkat(store_->tmp_dir(), temp_name_.c_str(), 0);
  }

  LocalStore* store_;
  std::string key_, temp_name_;
  Fd fd_;
  bool durable_;
  bool if_absent_;
  std::optional<std::string> if_attributes_;
  std::string attributes_;
  Xxh3Stream checksum_;
  uint64_t written_ = 0;
  bool done_ = false;
};

// A pinned version: the open file, checked at open.
class LocalObjectReader final : public ObjectReader {
 public:
  explicit LocalObjectReader(OpenObjectRef obj) : obj_(std::move(obj)) {}
  uint64_t size() const override { return obj_->size; }
  const std::string& attributes() const override { return obj_->attributes; }
  int64_t mtime() const override { return obj_->mtime; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dest) const override {
    RangeRead r{.key = obj_->key, .offset = offset, .dest = dest};
    OC_RETURN_IF_ERROR(CheckRange(r, obj_->size));
    return PreadRange(*obj_, r);
  }
  Status ReadAtIfCached(uint64_t offset, std::span<std::byte> dest) const override {
    RangeRead r{.key = obj_->key, .offset = offset, .dest = dest};
    OC_RETURN_IF_ERROR(CheckRange(r, obj_->size));
    // RWF_NOWAIT: fail with EAGAIN instead of waiting for the device.
    size_t done = 0;
    while (done < dest.size()) {
      struct iovec iov {
        dest.data() + done, dest.size() - done
      };
      ssize_t n = ::preadv2(obj_->fd.get(), &iov, 1, static_cast<off_t>(offset + done), RWF_NOWAIT);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return UnavailableError("not in the page cache");
      }
      done += static_cast<size_t>(n);
    }
    return Status();
  }
  // The value is the file's first size() bytes (the trailer follows it: object_file.h).
  std::optional<FileExtent> file_extent() const override {
    return FileExtent{.fd = obj_->fd.get(), .base = 0};
  }

 private:
  OpenObjectRef obj_;
};

Result<std::unique_ptr<ObjectWriter>> LocalStore::NewWriter(std::string_view key,
                                                            const PutOptions& put_options) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  OC_RETURN_IF_ERROR(ValidateAttributes(put_options.attributes));
  const std::string temp_name = std::to_string(next_temp_++);
  Fd fd(::openat(tmp_dir_.get(), temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                 kStoreFileMode));
  if (!fd.valid()) {
    return ErrnoError("storing '" + std::string(key) + "': creating temporary file", errno);
  }
  return std::unique_ptr<ObjectWriter>(
      new LocalObjectWriter(this, std::string(key), temp_name, std::move(fd),
                            put_options.durable.value_or(options_.durable), put_options.if_absent,
                            put_options.if_attributes, put_options.attributes));
}

Result<std::unique_ptr<ObjectReader>> LocalStore::OpenReaderIfCached(std::string_view key) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  IndexShard& s = index_[IndexShardOf(key)];
  std::lock_guard lock(s.mu);
  const EntryId id = s.Find(key);
  if (id == kNoEntry) return NotFoundError("reading '" + std::string(key) + "': no such object");
  auto open = s.open_files.find(key);
  if (open == s.open_files.end()) return UnavailableError("object file is not open");
  s.objects.Touch(id, ++clock_);
  return std::unique_ptr<ObjectReader>(new LocalObjectReader(open->second));
}

Result<std::unique_ptr<ObjectReader>> LocalStore::OpenReader(std::string_view key) {
  OC_ASSIGN_OR_RETURN(OpenObjectRef obj, OpenForRead(key));
  return std::unique_ptr<ObjectReader>(new LocalObjectReader(std::move(obj)));
}

Status LocalStore::Put(std::string_view key, std::span<const std::byte> value,
                       const PutOptions& put_options) {
  // Refused before a temporary file is made; the writer's Append checks the same.
  const uint64_t footprint = ObjectFileFootprint(value.size(), key.size());
  if (const std::optional<uint64_t> cap = capacity(); cap && footprint > *cap) {
    return ResourceExhaustedError(
        "storing '" + std::string(key) + "': " + std::to_string(value.size()) +
        " bytes (a file of " + std::to_string(footprint) +
        " bytes on disk) exceed the store capacity of " + std::to_string(*cap));
  }
  OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectWriter> writer, NewWriter(key, put_options));
  OC_RETURN_IF_ERROR(writer->Append(value));
  return writer->Commit();
}

Status LocalStore::MatchAttributes(const IndexShard& s, std::string_view key,
                                   std::string_view attributes, const std::string& what) const {
  if (!s.Contains(key)) return NotFoundError(what + ": no such object");
  Fd fd(::openat(DirFor(key), LocalStoreFileName(key).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return NotFoundError(what + ": no such object");
    return ErrnoError(what, errno);
  }
  OC_ASSIGN_OR_RETURN(std::string current, GetAttributes(fd.get(), std::string(key)));
  if (current != attributes) return FailedPreconditionError(what + ": the object was replaced");
  return Status();
}

Status LocalStore::Install(const std::string& key, const std::string& temp_name, uint64_t size,
                           bool durable, bool if_absent,
                           const std::optional<std::string>& if_attributes) {
  const std::string what = "storing '" + key + "'";
  const std::string file_name = LocalStoreFileName(key);
  const int dir = DirFor(key);
  const uint64_t footprint = ObjectFileFootprint(size, key.size());
  const std::shared_ptr<SharedCapacity>& shared = options_.shared_capacity;
  // The temporary file goes, and what MakeRoom took with it.
  auto abandon = [&](Status why) {
    ::unlinkat(tmp_dir_.get(), temp_name.c_str(), 0);
    if (shared) shared->used -= footprint;
    return why;
  };
  if (size > ObjectIndex::kMaxObjectBytes) {
    ::unlinkat(tmp_dir_.get(), temp_name.c_str(), 0);
    return InvalidArgumentError(what + ": " + std::to_string(size) +
                                " bytes exceed the largest object of " +
                                std::to_string(ObjectIndex::kMaxObjectBytes));
  }
  if (Status room = MakeRoom(key, footprint); !room.ok()) {
    ::unlinkat(tmp_dir_.get(), temp_name.c_str(), 0);
    return room;
  }
  const uint64_t hash = KeyHash(key);
  IndexShard& s = index_[IndexShardOfHash(hash)];
  {
    // Rename and index update together, so the index always matches the directory.
    std::lock_guard lock(s.mu);
    const bool exists = s.objects.Contains(key, hash);
    if (if_absent && exists) return abandon(AlreadyExistsError(what + ": the name exists"));
    if (if_attributes) {
      if (Status m = MatchAttributes(s, key, *if_attributes, what); !m.ok()) return abandon(m);
    }
    if (!exists && !s.objects.HasRoomFor(key)) {
      return abandon(ResourceExhaustedError(what + ": the index has no room for more objects"));
    }
    if (::renameat(tmp_dir_.get(), temp_name.c_str(), dir, file_name.c_str()) != 0) {
      return abandon(ErrnoError(what + ": renaming into place", errno));
    }
    s.Mutated(key);
    auto [id, inserted] = s.objects.Insert(key, hash);
    if (inserted) {
      objects_++;
    } else {
      Uncount(key, s.objects.size(id));
    }
    s.objects.set_size(id, size);
    s.objects.Touch(id, ++clock_);
    Count(key, size, /*taken=*/true);
  }
  if (durable && ::fsync(dir) != 0) return ErrnoError(what + ": syncing directory", errno);
  EvictToCapacity();
  return Status();
}

Status LocalStore::MakeRoom(const std::string& key, uint64_t footprint) {
  const std::optional<uint64_t> cap = options_.capacity_bytes;
  if (cap && IsRecordName(key)) {
    const uint64_t records = records_footprint_.load();
    if (footprint > *cap || records > *cap - footprint) {
      return ResourceExhaustedError(
          "storing '" + key + "': records (buckets and the parts of unfinished multipart " +
          "uploads) would take " + std::to_string(records) + " + " + std::to_string(footprint) +
          " bytes of the store's capacity of " + std::to_string(*cap) +
          " (complete or abort uploads)");
    }
  }
  SharedCapacity* shared = options_.shared_capacity.get();
  if (shared == nullptr) return Status();
  std::lock_guard evict_lock(evict_mu_);
  uint64_t pinned_seen = 0;
  while (!shared->TryTake(footprint)) {
    if (!EvictOldest(&pinned_seen)) {
      return ResourceExhaustedError("storing '" + key + "': the server's capacity of " +
                                    std::to_string(shared->limit) + " bytes is full (" +
                                    std::to_string(shared->used.load()) +
                                    " bytes in use) and this namespace has nothing to evict");
    }
  }
  return Status();
}

void LocalStore::EvictToCapacity() {
  if (!capacity()) return;
  std::lock_guard evict_lock(evict_mu_);
  uint64_t pinned_seen = 0;
  while (OverCapacity() && EvictOldest(&pinned_seen)) {
  }
}

bool LocalStore::EvictOldest(uint64_t* pinned_seen) {
  // The global least recently used object is the oldest of the shards' LRU tails.
  IndexShard* victim = nullptr;
  uint64_t oldest = UINT64_MAX;
  for (IndexShard& s : index_) {
    std::lock_guard lock(s.mu);
    if (EntryId e = s.objects.LeastRecent(); e != kNoEntry && s.objects.stamp(e) < oldest) {
      oldest = s.objects.stamp(e);
      victim = &s;
    }
  }
  if (victim == nullptr) return false;
  std::lock_guard lock(victim->mu);
  ObjectIndex& objects = victim->objects;
  const EntryId e = objects.LeastRecent();
  if (e == kNoEntry || objects.stamp(e) != oldest) return true;  // touched meanwhile: look again
  if (objects.pinned_until(e) >= std::time(nullptr)) {
    // Pinned: it goes to the front, as if used now; give up once every object was pinned.
    objects.Touch(e, ++clock_);
    return ++*pinned_seen <= objects_.load();
  }
  const std::string key = objects.Name(e);
  ::unlinkat(DirFor(key), LocalStoreFileName(key).c_str(), 0);
  victim->Mutated(key);
  Forget(*victim, key, e);
  evictions_++;
  return true;
}

Result<ObjectInfo> LocalStore::Stat(std::string_view key) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  IndexShard& s = index_[IndexShardOf(key)];
  std::lock_guard lock(s.mu);
  const EntryId id = s.Find(key);
  if (id == kNoEntry) return NotFoundError("'" + std::string(key) + "': no such object");
  return ObjectInfo{std::string(key), s.objects.size(id)};
}

Result<OpenObjectRef> LocalStore::OpenForRead(std::string_view key) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "reading '" + std::string(key) + "'";
  IndexShard& s = index_[IndexShardOf(key)];
  uint64_t mutations_seen;
  {
    std::lock_guard lock(s.mu);
    const EntryId id = s.Find(key);
    if (id == kNoEntry) return NotFoundError(what + ": no such object");
    s.objects.Touch(id, ++clock_);
    if (auto open = s.open_files.find(key); open != s.open_files.end()) return open->second;
    mutations_seen = s.mutations;
  }
  auto opened = std::make_shared<OpenObject>();
  OpenObject& obj = *opened;
  obj.fd = Fd(OpenForReading(DirFor(key), LocalStoreFileName(key).c_str()));
  if (!obj.fd.valid()) {
    // Deleted or evicted since the lookup: a miss like any other.
    if (errno == ENOENT) return NotFoundError(what + ": no such object");
    return ErrnoError(what, errno);
  }
  struct stat st;
  if (::fstat(obj.fd.get(), &st) != 0) return ErrnoError(what, errno);
  obj.inode = st.st_ino;
  Result<Trailer> t = ReadTrailer(obj.fd.get(), static_cast<uint64_t>(st.st_size), key);
  if (!t.has_value()) {
    if (t.error().code() != StatusCode::kDataLoss) return t.error().Annotate(what);
    return DropDamaged(key, obj.inode, t.error().Annotate(what));
  }
  obj.size = t->payload_len;
  obj.checksum = t->payload_checksum;
  obj.key = std::string(key);
  obj.mtime = st.st_mtim.tv_sec;
  if (Result<std::string> attrs = GetAttributes(obj.fd.get(), key); attrs.has_value()) {
    obj.attributes = std::move(*attrs);
  } else if (attrs.error().code() == StatusCode::kDataLoss) {
    return DropDamaged(key, obj.inode, attrs.error().Annotate(what));
  } else {
    return attrs.error().Annotate(what);
  }
  std::lock_guard lock(s.mu);
  if (s.mutations == mutations_seen && open_files_per_shard_ > 0) {
    if (s.open_files.size() >= open_files_per_shard_) s.open_files.erase(s.open_files.begin());
    s.open_files.emplace(std::string(key), opened);
  }
  return OpenObjectRef(std::move(opened));
}

Status LocalStore::DropDamaged(std::string_view key, ino_t inode, const Status& why) {
  IndexShard& s = index_[IndexShardOf(key)];
  std::lock_guard lock(s.mu);
  const std::string name = LocalStoreFileName(key);
  struct stat st;
  if (::fstatat(DirFor(key), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == inode) {
    ::unlinkat(DirFor(key), name.c_str(), 0);
    s.Mutated(key);
    if (const EntryId id = s.Find(key); id != kNoEntry) Forget(s, key, id);
  }
  return why;
}

Result<size_t> LocalStore::Retrieve(std::string_view key, std::span<std::byte> dest) {
  OC_ASSIGN_OR_RETURN(OpenObjectRef ref, OpenForRead(key));
  const OpenObject& obj = *ref;
  const std::string what = "reading '" + std::string(key) + "'";
  if (dest.size() < obj.size) {
    return ResourceExhaustedError(what + ": object is " + std::to_string(obj.size) +
                                  " bytes, buffer " + std::to_string(dest.size()));
  }
  std::span<std::byte> out = dest.first(obj.size);
  if (int e = PreadAll(obj.fd.get(), out, 0); e != 0) {
    if (e > 0) return ErrnoError(what, e);
    return DropDamaged(key, obj.inode, DataLossError(what + ": file shorter than its footer says"));
  }
  if (Xxh3(out.data(), out.size()) != obj.checksum) {
    return DropDamaged(key, obj.inode, DataLossError(what + ": payload checksum mismatch"));
  }
  return obj.size;
}

Status LocalStore::RetrieveRanges(std::span<RangeRead> reads) {
  ServeRangeReads(
      reads, [this](std::string_view key) { return OpenForRead(key); },
      [](const OpenObjectRef& obj) { return obj->size; },
      [](const OpenObjectRef& obj, RangeRead& r) { return PreadRange(*obj, r); });
  return Status();
}

Result<std::vector<bool>> LocalStore::Exist(std::span<const std::string_view> keys) {
  // Shard by shard, each lock taken once, with the table slots and then the records of names a
  // few places ahead prefetched so that their cache misses overlap (docs/local-store.md,
  // "Index").
  constexpr size_t kAhead = 8;
  const size_t n = keys.size();
  constexpr uint8_t kInvalid = 0xff;  // an invalid name is absent
  static_assert(kIndexShards < kInvalid);
  std::vector<uint64_t> hashes(n);
  std::vector<uint8_t> shard_of(n, kInvalid);
  std::array<uint32_t, kIndexShards + 1> start{};  // where each shard's positions begin
  for (size_t i = 0; i < n; ++i) {
    if (!ValidateKey(keys[i]).ok()) continue;
    hashes[i] = KeyHash(keys[i]);
    shard_of[i] = static_cast<uint8_t>(IndexShardOfHash(hashes[i]));
    start[shard_of[i] + 1]++;
  }
  for (size_t s = 0; s < kIndexShards; ++s) start[s + 1] += start[s];
  std::vector<uint32_t> order(start[kIndexShards]);  // positions of valid names, by shard
  std::array<uint32_t, kIndexShards> fill{};
  for (size_t i = 0; i < n; ++i) {
    if (shard_of[i] != kInvalid)
      order[start[shard_of[i]] + fill[shard_of[i]]++] = static_cast<uint32_t>(i);
  }
  std::vector<bool> out(n);
  for (size_t s = 0; s < kIndexShards; ++s) {
    IndexShard& shard = index_[s];
    std::lock_guard lock(shard.mu);
    for (uint32_t j = start[s]; j < start[s + 1]; ++j) {
      if (j + 2 * kAhead < start[s + 1]) shard.objects.Prefetch(hashes[order[j + 2 * kAhead]]);
      if (j + kAhead < start[s + 1]) shard.objects.PrefetchEntry(hashes[order[j + kAhead]]);
      const uint32_t i = order[j];
      out[i] = shard.objects.Contains(keys[i], hashes[i]);
    }
  }
  return out;
}

Status LocalStore::Delete(std::string_view key) { return DeleteMatching(key, std::nullopt); }

Status LocalStore::Pin(std::string_view key, int64_t until) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "pinning '" + std::string(key) + "'";
  IndexShard& s = index_[IndexShardOf(key)];
  std::lock_guard lock(s.mu);
  const EntryId id = s.Find(key);
  if (id == kNoEntry) return NotFoundError(what + ": no such object");
  if (until <= s.objects.pinned_until(id)) return Status();
  // Kept with the file too, so that a restart keeps it (a replacement keeps it in memory).
  Fd f(::openat(DirFor(key), LocalStoreFileName(key).c_str(), O_RDONLY | O_CLOEXEC));
  if (!f.valid()) return ErrnoError(what, errno);
  const std::string text = std::to_string(until);
  if (::fsetxattr(f.get(), kPinXattr, text.data(), text.size(), 0) != 0) {
    return ErrnoError(what, errno);
  }
  s.objects.set_pinned_until(id, until);
  return Status();
}

Status LocalStore::DeleteIf(std::string_view key, std::string_view attributes) {
  return DeleteMatching(key, attributes);
}

Status LocalStore::DeleteMatching(std::string_view key,
                                  std::optional<std::string_view> attributes) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "deleting '" + std::string(key) + "'";
  IndexShard& s = index_[IndexShardOf(key)];
  std::lock_guard lock(s.mu);
  const EntryId id = s.Find(key);
  if (id == kNoEntry) return NotFoundError(what + ": no such object");
  if (attributes) OC_RETURN_IF_ERROR(MatchAttributes(s, key, *attributes, what));
  if (::unlinkat(DirFor(key), LocalStoreFileName(key).c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoError(what, errno);
  }
  s.Mutated(key);
  Forget(s, key, id);
  return Status();
}

Result<ListPage> LocalStore::List(const ListOptions& options) {
  std::vector<ObjectInfo> candidates;
  for (IndexShard& s : index_) {
    std::lock_guard lock(s.mu);
    s.objects.CollectListCandidates(options, &candidates);
  }
  return FinishListPage(std::move(candidates), options.max_keys);
}

// ---- open and rebuild --------------------------------------------------------------------

// A pin kept with an object file (LocalStore::Pin), or 0. One system call: the path through
// /proc names the directory by its descriptor.
int64_t ReadPin(int dir_fd, const char* entry) {
  char buf[24];
  const std::string path = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + entry;
  const ssize_t n = ::getxattr(path.c_str(), kPinXattr, buf, sizeof(buf));
  int64_t until = 0;
  if (n > 0) std::from_chars(buf, buf + n, until);
  return until;
}

struct ShardScan {
  std::array<std::vector<FoundObject>, kIndexShards> by_index_shard;
  uint64_t damaged = 0;
  Status status;
};

void ScanDirShard(int dir_fd, size_t shard, ShardScan* out) {
  out->status =
      ForEachDirEntry(dir_fd, "object directory " + std::to_string(shard), [&](const char* entry) {
        std::string_view name = entry;
        struct stat st;
        if (::fstatat(dir_fd, entry, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return;
        std::optional<std::string> key;
        uint64_t trailer_len = 0;
        if (name.starts_with('~')) {
          // Long name: the key is in the trailer.
          Fd f(::openat(dir_fd, entry, O_RDONLY | O_CLOEXEC));
          if (!f.valid()) return;
          Result<Trailer> t = ReadTrailer(f.get(), static_cast<uint64_t>(st.st_size), std::nullopt);
          if (t.has_value() && LocalStoreFileName(t->key) == name) key = std::move(t->key);
        } else {
          key = DecodeFileName(name);
        }
        if (key) trailer_len = key->size() + kFooterBytes;
        if (!key || DirShardOf(*key) != shard || static_cast<uint64_t>(st.st_size) < trailer_len ||
            static_cast<uint64_t>(st.st_size) - trailer_len > ObjectIndex::kMaxObjectBytes) {
          // Not a file this store wrote where it belongs, or too short to be one.
          ::unlinkat(dir_fd, entry, 0);
          out->damaged++;
          return;
        }
        const int64_t mtime_us = st.st_mtim.tv_sec * 1'000'000 + st.st_mtim.tv_nsec / 1000;
        const size_t index_shard = IndexShardOf(*key);
        out->by_index_shard[index_shard].push_back(
            {std::move(*key), static_cast<uint64_t>(st.st_size) - trailer_len,
             static_cast<uint64_t>(std::max<int64_t>(mtime_us, 0)), ReadPin(dir_fd, entry)});
      });
}

// Checks that `root` is a store of this format, or an empty directory to make into one.
Status CheckFormat(int root, const std::string& path) {
  Fd f(::openat(root, std::string(kFormatFile).c_str(), O_RDONLY | O_CLOEXEC));
  if (f.valid()) {
    char buf[64] = {};
    ssize_t n = ::read(f.get(), buf, sizeof(buf));
    if (n != static_cast<ssize_t>(kFormatText.size()) ||
        std::string_view(buf, static_cast<size_t>(n)) != kFormatText) {
      return FailedPreconditionError(path + " holds a store of an unknown format (FORMAT says '" +
                                     std::string(buf, n > 0 ? static_cast<size_t>(n) : 0) + "')");
    }
    return Status();
  }
  if (errno != ENOENT) return ErrnoError("opening " + path + "/FORMAT", errno);
  // No FORMAT file: only an empty directory may become a store.
  bool empty = true;
  OC_RETURN_IF_ERROR(ForEachDirEntry(root, path, [&](const char* name) {
    if (std::string_view(name) != "LOCK") empty = false;
  }));
  if (!empty) {
    return FailedPreconditionError(
        path + " is not empty and is not an objectcache store (no FORMAT file)");
  }
  Fd w(::openat(root, "FORMAT.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kStoreFileMode));
  if (!w.valid() || WriteAll(w.get(), kFormatText.data(), kFormatText.size()) != 0 ||
      ::fsync(w.get()) != 0 || ::renameat(root, "FORMAT.tmp", root, "FORMAT") != 0) {
    return ErrnoError("writing " + path + "/FORMAT", errno);
  }
  return Status();
}

// The last steps of an open, once the index is built.
std::unique_ptr<Store> FinishOpen(std::unique_ptr<LocalStore> store,
                                  std::chrono::steady_clock::time_point start,
                                  LocalStoreOpenStats local_stats, LocalStoreOpenStats* stats) {
  store->EvictToCapacity();  // the capacity may have shrunk since the last run
  store->Opened();
  StoreUsage usage = store->Usage();
  local_stats.objects = usage.objects;
  local_stats.bytes = usage.bytes;
  local_stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stats) *stats = local_stats;
  return store;
}

}  // namespace

Result<std::unique_ptr<Store>> OpenLocalStore(const LocalStoreOptions& options,
                                              LocalStoreOpenStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  const std::string& path = options.root;
  if (path.empty()) return InvalidArgumentError("local store: empty directory path");
  std::error_code mkdir_error;
  // With its parents; the store's own directory is its owner's alone (parents keep the umask's).
  if (std::filesystem::create_directories(path, mkdir_error) &&
      ::chmod(path.c_str(), kStoreDirMode) != 0) {
    return ErrnoError("setting the mode of store directory " + path, errno);
  }
  if (mkdir_error) return ErrnoError("creating store directory " + path, mkdir_error.value());
  Fd root(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return ErrnoError("opening store directory " + path, errno);

  OC_RETURN_IF_ERROR(CheckFormat(root.get(), path));
  Fd lock(::openat(root.get(), "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, kStoreFileMode));
  if (!lock.valid()) return ErrnoError("creating " + path + "/LOCK", errno);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return FailedPreconditionError("store " + path + " is in use by another process");
    }
    return ErrnoError("locking " + path, errno);
  }

  OC_RETURN_IF_ERROR(EnsureDir(root.get(), "objects"));
  OC_RETURN_IF_ERROR(EnsureDir(root.get(), "tmp"));
  OC_ASSIGN_OR_RETURN(Fd objects, OpenDir(root.get(), "objects"));
  OC_ASSIGN_OR_RETURN(Fd tmp, OpenDir(root.get(), "tmp"));
  std::array<Fd, kDirShards> dirs;
  for (size_t i = 0; i < kDirShards; ++i) {
    const std::string name = EncodeHex(reinterpret_cast<const uint8_t*>(&i), 1);
    OC_RETURN_IF_ERROR(EnsureDir(objects.get(), name.c_str()));
    OC_ASSIGN_OR_RETURN(dirs[i], OpenDir(objects.get(), name.c_str()));
  }

  LocalStoreOpenStats local_stats;
  // Temporary files are writes that never completed: remove them.
  OC_RETURN_IF_ERROR(ForEachDirEntry(tmp.get(), path + "/tmp", [&](const char* name) {
    if (::unlinkat(tmp.get(), name, 0) == 0) local_stats.removed_temp_files++;
  }));

  unsigned threads = options.rebuild_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  auto store = std::make_unique<LocalStore>(options, std::move(root), std::move(lock),
                                            std::move(tmp), std::move(dirs));
  if (Status loaded = store->LoadIndexFile(threads); loaded.ok()) {
    local_stats.index_file = true;
    return FinishOpen(std::move(store), start, local_stats, stats);
  } else if (loaded.code() != StatusCode::kNotFound) {
    local_stats.index_file_refused = loaded.message();
  }
  std::vector<ShardScan> scans(kDirShards);
  ParallelFor(kDirShards, threads, [&](size_t i) { ScanDirShard(store->dir(i), i, &scans[i]); });
  local_stats.scan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (ShardScan& scan : scans) {
    if (!scan.status.ok()) return scan.status.Annotate("opening store " + path);
    local_stats.removed_damaged_files += scan.damaged;
  }
  std::array<Status, kIndexShards> built;
  ParallelFor(kIndexShards, threads, [&](size_t shard) {
    std::vector<FoundObject> found;
    for (ShardScan& scan : scans) {
      std::vector<FoundObject>& part = scan.by_index_shard[shard];
      std::move(part.begin(), part.end(), std::back_inserter(found));
      part = {};
    }
    built[shard] = store->RebuildIndexShard(shard, &found);
  });
  for (const Status& status : built) {
    if (!status.ok()) return status.Annotate("opening store " + path);
  }
  return FinishOpen(std::move(store), start, local_stats, stats);
}

}  // namespace objectcache
