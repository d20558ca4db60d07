#include "store/local/local_store_impl.h"

namespace objectcache {

using namespace local;  // the store's own pieces: POSIX I/O, the object file, the index

namespace local {

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

}  // namespace local

namespace {

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
  // No FORMAT file: only an empty directory may become a store. LOCK and FORMAT.tmp are the
  // store's own files, not content: a creation killed before FORMAT.tmp was renamed into place
  // starts again.
  bool empty = true;
  OC_RETURN_IF_ERROR(ForEachDirEntry(root, path, [&](const char* name) {
    if (std::string_view(name) != "LOCK" && std::string_view(name) != "FORMAT.tmp") empty = false;
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
