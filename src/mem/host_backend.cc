// The host page backend: a PROT_NONE reservation whose pages are mapped one by one from a
// memfd (MAP_SHARED | MAP_FIXED | MAP_POPULATE, so the memory is faulted in by the mapping
// thread, not by the first user), and unmapped by mapping PROT_NONE over them and punching the
// page out of the memfd, which returns its memory to the OS.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "device/cuda_driver.h"
#include "objectcache/kv_pool.h"

namespace objectcache {
namespace {

class HostPageBackend final : public PageBackend {
 public:
  HostPageBackend(int fd, HostBackendOptions options) : fd_(fd), options_(options) {}
  ~HostPageBackend() override { ::close(fd_); }

  std::string name() const override { return "host"; }
  uint64_t page_bytes() const override { return options_.page_bytes; }
  bool host_accessible() const override { return true; }

  Result<std::byte*> Reserve(uint64_t bytes) override {
    if (bytes == 0 || bytes % options_.page_bytes != 0) {
      return InvalidArgumentError("a reservation is a whole number of pages");
    }
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      return ErrnoError("sizing the memfd", errno);
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ErrnoError("reserving address space", errno);
    return static_cast<std::byte*>(p);
  }

  Status Map(std::byte* base, uint64_t index) override {
    const uint64_t p = options_.page_bytes;
    void* at = ::mmap(base + index * p, p, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd_, static_cast<off_t>(index * p));
    if (at == MAP_FAILED) return ErrnoError("mapping a page", errno);
    if (options_.register_for_device) {
      Status s = cuda::RegisterHostMemory(base + index * p, p);
      if (!s.ok() && s.code() != StatusCode::kUnimplemented &&
          s.code() != StatusCode::kUnavailable) {
        (void)Unmap(base, index);
        return s;
      }
    }
    return Status();
  }

  Status Unmap(std::byte* base, uint64_t index) override {
    const uint64_t p = options_.page_bytes;
    if (options_.register_for_device) (void)cuda::UnregisterHostMemory(base + index * p);
    void* at = ::mmap(base + index * p, p, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) return ErrnoError("unmapping a page", errno);
    if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(index * p),
                    static_cast<off_t>(p)) != 0) {
      return ErrnoError("returning a page's memory", errno);
    }
    return Status();
  }

  void Release(std::byte* base, uint64_t bytes) override {
    ::munmap(base, bytes);
    (void)::ftruncate(fd_, 0);
  }

  Status Copy(std::byte* dst, const std::byte* src, uint64_t bytes) override {
    std::memmove(dst, src, bytes);
    return Status();
  }

 private:
  const int fd_;
  const HostBackendOptions options_;
};

}  // namespace

Result<std::unique_ptr<PageBackend>> NewHostPageBackend(HostBackendOptions options) {
  const long os_page = ::sysconf(_SC_PAGESIZE);
  if (options.page_bytes == 0 || options.page_bytes % static_cast<uint64_t>(os_page) != 0) {
    return InvalidArgumentError("the page size must be a multiple of " + std::to_string(os_page));
  }
  const int fd = ::memfd_create("objectcache-kv-pool", MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("memfd_create", errno);
  return std::unique_ptr<PageBackend>(new HostPageBackend(fd, options));
}

}  // namespace objectcache
