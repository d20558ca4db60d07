#include "store/local/posix_io.h"

#include <fcntl.h>
#include <sys/stat.h>

namespace objectcache::local {

int WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

int PreadAll(int fd, std::span<std::byte> dest, uint64_t offset) {
  size_t done = 0;
  while (done < dest.size()) {
    ssize_t r = ::pread(fd, dest.data() + done, dest.size() - done, offset + done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return -1;
    done += static_cast<size_t>(r);
  }
  return 0;
}

int OpenForReading(int dir, const char* name) {
  const int fd = ::openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd >= 0 || errno != EPERM) return fd;
  return ::openat(dir, name, O_RDONLY | O_CLOEXEC);
}

Status EnsureDir(int parent, const char* name) {
  if (::mkdirat(parent, name, kStoreDirMode) != 0 && errno != EEXIST) {
    return ErrnoError(std::string("creating directory ") + name, errno);
  }
  return Status();
}

Result<Fd> OpenDir(int parent, const char* name) {
  Fd fd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(std::string("opening directory ") + name, errno);
  return fd;
}

}  // namespace objectcache::local
