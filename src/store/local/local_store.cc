#include "store/local/local_store_impl.h"

namespace objectcache::local {
namespace {

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
}  // namespace

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
  using Reader = Result<std::unique_ptr<ObjectReader>>;
  return WithIndexEntry(key, "reading", [&](IndexShard& s, EntryId id) -> Reader {
    auto open = s.open_files.find(key);
    if (open == s.open_files.end()) return UnavailableError("object file is not open");
    s.objects.Touch(id, ++clock_);
    return std::unique_ptr<ObjectReader>(new LocalObjectReader(open->second));
  });
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
  return WithIndexEntry(key, "", [&](IndexShard& s, EntryId id) -> Result<ObjectInfo> {
    return ObjectInfo{std::string(key), s.objects.size(id)};
  });
}

Result<OpenObjectRef> LocalStore::OpenForRead(std::string_view key) {
  OC_RETURN_IF_ERROR(ValidateKey(key));
  IndexShard& s = index_[IndexShardOf(key)];
  uint64_t mutations_seen;
  {
    std::lock_guard lock(s.mu);
    const EntryId id = s.Find(key);
    if (id == kNoEntry) return NotFoundError(Doing("reading", key) + ": no such object");
    s.objects.Touch(id, ++clock_);
    if (auto open = s.open_files.find(key); open != s.open_files.end()) return open->second;
    mutations_seen = s.mutations;
  }
  auto opened = std::make_shared<OpenObject>();
  OpenObject& obj = *opened;
  obj.fd = Fd(OpenForReading(DirFor(key), LocalStoreFileName(key).c_str()));
  if (!obj.fd.valid()) {
    // Deleted or evicted since the lookup: a miss like any other.
    if (errno == ENOENT) return NotFoundError(Doing("reading", key) + ": no such object");
    return ErrnoError(Doing("reading", key), errno);
  }
  struct stat st;
  if (::fstat(obj.fd.get(), &st) != 0) return ErrnoError(Doing("reading", key), errno);
  obj.inode = st.st_ino;
  Result<Trailer> t = ReadTrailer(obj.fd.get(), static_cast<uint64_t>(st.st_size), key);
  if (!t.has_value()) {
    if (t.error().code() != StatusCode::kDataLoss) return t.error().Annotate(Doing("reading", key));
    return DropDamaged(key, obj.inode, t.error().Annotate(Doing("reading", key)));
  }
  obj.size = t->payload_len;
  obj.checksum = t->payload_checksum;
  obj.key = std::string(key);
  obj.mtime = st.st_mtim.tv_sec;
  if (Result<std::string> attrs = GetAttributes(obj.fd.get(), key); attrs.has_value()) {
    obj.attributes = std::move(*attrs);
  } else if (attrs.error().code() == StatusCode::kDataLoss) {
    return DropDamaged(key, obj.inode, attrs.error().Annotate(Doing("reading", key)));
  } else {
    return attrs.error().Annotate(Doing("reading", key));
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
  if (dest.size() < obj.size) {
    return ResourceExhaustedError(Doing("reading", key) + ": object is " +
                                  std::to_string(obj.size) + " bytes, buffer " +
                                  std::to_string(dest.size()));
  }
  std::span<std::byte> out = dest.first(obj.size);
  if (int e = PreadAll(obj.fd.get(), out, 0); e != 0) {
    if (e > 0) return ErrnoError(Doing("reading", key), e);
    return DropDamaged(
        key, obj.inode,
        DataLossError(Doing("reading", key) + ": file shorter than its footer says"));
  }
  if (Xxh3(out.data(), out.size()) != obj.checksum) {
    return DropDamaged(key, obj.inode,
                       DataLossError(Doing("reading", key) + ": payload checksum mismatch"));
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
  return WithIndexEntry(key, "pinning", [&](IndexShard& s, EntryId id) {
    if (until <= s.objects.pinned_until(id)) return Status();
    // Kept with the file too, so that a restart keeps it (a replacement keeps it in memory).
    Fd f(::openat(DirFor(key), LocalStoreFileName(key).c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.valid()) return ErrnoError(Doing("pinning", key), errno);
    const std::string text = std::to_string(until);
    if (::fsetxattr(f.get(), kPinXattr, text.data(), text.size(), 0) != 0) {
      return ErrnoError(Doing("pinning", key), errno);
    }
    s.objects.set_pinned_until(id, until);
    return Status();
  });
}

Status LocalStore::DeleteIf(std::string_view key, std::string_view attributes) {
  return DeleteMatching(key, attributes);
}

Status LocalStore::DeleteMatching(std::string_view key,
                                  std::optional<std::string_view> attributes) {
  return WithIndexEntry(key, "deleting", [&](IndexShard& s, EntryId id) {
    const std::string what = Doing("deleting", key);
    if (attributes) OC_RETURN_IF_ERROR(MatchAttributes(s, key, *attributes, what));
    if (::unlinkat(DirFor(key), LocalStoreFileName(key).c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoError(what, errno);
    }
    s.Mutated(key);
    Forget(s, key, id);
    return Status();
  });
}

Result<ListPage> LocalStore::List(const ListOptions& options) {
  std::vector<ObjectInfo> candidates;
  for (IndexShard& s : index_) {
    std::lock_guard lock(s.mu);
    s.objects.CollectListCandidates(options, &candidates);
  }
  return FinishListPage(std::move(candidates), options.max_keys);
}

}  // namespace objectcache::local
