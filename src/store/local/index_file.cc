#include "store/local/index_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/byte_order.h"
#include "core/xxh3.h"
#include "store/local/posix_io.h"

namespace objectcache::local {

namespace {

constexpr std::string_view kMagic = "objectcache index v1\n";
constexpr char kTempName[] = "INDEX.tmp";
constexpr size_t kBufferBytes = 1 << 20;
// The smallest record: a 2-byte length, a 1-byte name, size, stamp and pin.
constexpr uint64_t kMinRecordBytes = 2 + 1 + 3 * 8;

Result<std::vector<uint64_t>> DirMtimes(std::span<const int> dirs) {
  std::vector<uint64_t> out;
  for (int dir : dirs) {
    struct stat st;
    if (::fstat(dir, &st) != 0) return ErrnoError("reading an object directory's time", errno);
    out.push_back(static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                  static_cast<uint64_t>(st.st_mtim.tv_nsec));
  }
  return out;
}

// Appends to a file through a buffer, hashing what it writes.
class HashedWriter {
 public:
  explicit HashedWriter(int fd) : fd_(fd) {}
  ByteWriter& out() { return out_; }
  // Writes the buffer out once it is large.
  int MaybeFlush() { return out_.size() >= kBufferBytes ? Flush() : 0; }
  int Flush() {
    hash_.Update(out_.data(), out_.size());
    const int e = WriteAll(fd_, out_.data(), out_.size());
    out_.str().clear();
    return e;
  }
  uint64_t Digest() const { return hash_.Digest(); }

 private:
  int fd_;
  ByteWriter out_;
  Xxh3Stream hash_;
};

// Reads a file through a buffer, hashing what it hands out.
class HashedReader {
 public:
  explicit HashedReader(int fd) : fd_(fd), buf_(kBufferBytes) {}
  // False at the end of the file or on an error (error() says which).
  bool Read(void* dest, size_t n, bool hashed = true) {
    auto* out = static_cast<char*>(dest);
    while (n > 0) {
      if (pos_ == end_ && !Fill()) return false;
      const size_t take = std::min(n, end_ - pos_);
      std::memcpy(out, buf_.data() + pos_, take);
      if (hashed) hash_.Update(buf_.data() + pos_, take);
      pos_ += take;
      out += take;
      n -= take;
    }
    return true;
  }
  template <typename T>
  bool Le(T* v, bool hashed = true) {
    unsigned char b[sizeof(T)];
    if (!Read(b, sizeof(T), hashed)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= uint64_t{b[i]} << (8 * i);
    *v = static_cast<T>(x);
    return true;
  }
  bool AtEnd() { return pos_ == end_ && !Fill(); }
  int error() const { return error_; }
  uint64_t Digest() const { return hash_.Digest(); }

 private:
  bool Fill() {
    ssize_t n;
    do {
      n = ::read(fd_, buf_.data(), buf_.size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) error_ = errno;
    pos_ = 0;
    end_ = n > 0 ? static_cast<size_t>(n) : 0;
    return n > 0;
  }

  int fd_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  size_t end_ = 0;
  int error_ = 0;
  Xxh3Stream hash_;
};

}  // namespace

Status WriteIndexFile(int root, std::span<IndexShard> shards, std::span<const int> dirs) {
  const std::string what = std::string("writing the index file ") + kIndexFileName;
  OC_ASSIGN_OR_RETURN(std::vector<uint64_t> mtimes, DirMtimes(dirs));
  Fd fd(::openat(root, kTempName, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kStoreFileMode));
  if (!fd.valid()) return ErrnoError(what, errno);
  uint64_t count = 0;
  for (IndexShard& s : shards) {
    std::lock_guard lock(s.mu);
    count += s.objects.size();
  }
  HashedWriter w(fd.get());
  w.out().Bytes(kMagic.data(), kMagic.size());
  w.out().U64(count);
  w.out().U64(mtimes.size());
  for (uint64_t t : mtimes) w.out().U64(t);
  uint64_t written = 0;
  int error = 0;
  for (IndexShard& s : shards) {
    std::lock_guard lock(s.mu);
    s.objects.ForEachInNameOrder([&](EntryId id) {
      const std::string name = s.objects.Name(id);
      w.out().U16(static_cast<uint16_t>(name.size()));
      w.out().Bytes(name.data(), name.size());
      w.out().U64(s.objects.size(id));
      w.out().U64(s.objects.stamp(id));
      w.out().U64(static_cast<uint64_t>(s.objects.pinned_until(id)));
      written++;
      if (error == 0) error = w.MaybeFlush();
    });
  }
  if (error == 0) error = w.Flush();
  if (written != count) {
    ::unlinkat(root, kTempName, 0);
    return InternalError(what + ": the index changed while it was written");
  }
  const uint64_t digest = w.Digest();
  w.out().U64(digest);
  if (error == 0) error = WriteAll(fd.get(), w.out().data(), w.out().size());
  if (error == 0 && ::fsync(fd.get()) != 0) error = errno;
  if (error == 0 && (error = fd.Close()) == 0 &&
      ::renameat(root, kTempName, root, kIndexFileName) != 0) {
    error = errno;
  }
  if (error == 0 && ::fsync(root) != 0) error = errno;
  if (error != 0) {
    ::unlinkat(root, kTempName, 0);
    return ErrnoError(what, error);
  }
  return Status();
}

Status ReadIndexFile(int root, std::span<const int> dirs,
                     const std::function<void(uint64_t)>& objects, const IndexFileVisitor& visit) {
  Fd fd(::openat(root, kIndexFileName, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return NotFoundError("no index file");
    return ErrnoError(std::string("opening the index file ") + kIndexFileName, errno);
  }
  // Gone before the store changes anything: a crash from here on reads the directories.
  const bool removed = ::unlinkat(root, kIndexFileName, 0) == 0 && ::fsync(root) == 0;
  if (!removed) return ErrnoError(std::string("removing the index file ") + kIndexFileName, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("reading the index file", errno);
  auto damaged = [](const std::string& why) { return DataLossError("index file: " + why); };
  HashedReader r(fd.get());
  char magic[kMagic.size()];
  uint64_t count = 0, dir_count = 0;
  if (!r.Read(magic, sizeof(magic)) || std::string_view(magic, sizeof(magic)) != kMagic ||
      !r.Le(&count) || !r.Le(&dir_count)) {
    return damaged("not an index file of this format");
  }
  if (dir_count != dirs.size()) return damaged("written for another directory layout");
  OC_ASSIGN_OR_RETURN(std::vector<uint64_t> mtimes, DirMtimes(dirs));
  for (uint64_t want : mtimes) {
    uint64_t got = 0;
    if (!r.Le(&got)) return damaged("truncated");
    if (got != want) {
      return FailedPreconditionError(
          "index file: an object directory changed since it was written");
    }
  }
  if (count > static_cast<uint64_t>(st.st_size) / kMinRecordBytes) {
    return damaged("states " + std::to_string(count) + " objects, more than it can hold");
  }
  objects(count);
  char name[kMaxKeyBytes];
  for (uint64_t i = 0; i < count; ++i) {
    uint16_t len = 0;
    uint64_t size = 0, stamp = 0, pin = 0;
    if (!r.Le(&len) || len == 0 || len > kMaxKeyBytes || !r.Read(name, len) || !r.Le(&size) ||
        !r.Le(&stamp) || !r.Le(&pin)) {
      return damaged("record " + std::to_string(i) + " is truncated or malformed");
    }
    if (size > ObjectIndex::kMaxObjectBytes) {
      return damaged("record " + std::to_string(i) + " has a size out of range");
    }
    OC_RETURN_IF_ERROR(visit({name, len}, size, stamp, static_cast<int64_t>(pin)));
  }
  const uint64_t digest = r.Digest();
  uint64_t stored = 0;
  if (!r.Le(&stored, /*hashed=*/false)) return damaged("truncated");
  if (stored != digest) return damaged("checksum mismatch");
  if (!r.AtEnd()) return damaged("bytes after the checksum");
  if (r.error() != 0) return ErrnoError("reading the index file", r.error());
  return Status();
}

}  // namespace objectcache::local
