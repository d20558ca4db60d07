// POSIX file I/O for the local store: an owning descriptor, whole writes and reads that retry
// short transfers and EINTR, and walking and making directories. No store logic here.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "objectcache/status.h"

namespace objectcache::local {

// What the store creates is its owner's alone: directories rwx------, files rw------- (the
// process's umask can only narrow them further).
inline constexpr mode_t kStoreDirMode = 0700;
inline constexpr mode_t kStoreFileMode = 0600;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes and reports the error close() may carry (delayed write errors).
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

// Writes all `n` bytes. Returns 0 or the errno.
int WriteAll(int fd, const char* p, size_t n);

// Reads exactly dest.size() bytes at `offset`. Returns 0, the errno, or -1 for end of file.
int PreadAll(int fd, std::span<std::byte> dest, uint64_t offset);
// Opens `name` under `dir` to read, without access-time updates (O_NOATIME: a response from
// files makes a sendfile call per slice, each of which would look at the access time) where the
// file is ours to open so; a plain read-only open where it is not (EPERM).
int OpenForReading(int dir, const char* name);

// Calls on(name) for each entry of a directory but "." and "..".
template <typename F>
Status ForEachDirEntry(int dir_fd, const std::string& what, F on) {
  int fd = ::dup(dir_fd);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    int e = errno;
    if (fd >= 0) ::close(fd);
    return ErrnoError("reading " + what, e);
  }
  ::rewinddir(d);
  while (dirent* ent = ::readdir(d)) {
    std::string_view name = ent->d_name;
    if (name != "." && name != "..") on(ent->d_name);
  }
  ::closedir(d);
  return Status();
}

// mkdir that accepts an existing directory.
Status EnsureDir(int parent, const char* name);

Result<Fd> OpenDir(int parent, const char* name);

}  // namespace objectcache::local
