#include "nvmekv/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "nvmekv/spec.h"

namespace objectcache::nvmekv {
namespace {

Result<std::string> PosixName(const std::string& name) {
  std::string bare = name.starts_with('/') ? name.substr(1) : name;
  if (bare.empty() || bare.size() > 200 || bare.find('/') != std::string::npos) {
    return InvalidArgumentError("shared memory name '" + name +
                                "': 1 to 200 characters, no '/' but an optional leading one");
  }
  return "/" + bare;
}

}  // namespace

Result<SharedMemory> SharedMemory::Create(const std::string& name, size_t queue_bytes,
                                          size_t data_bytes, bool replace) {
  OC_ASSIGN_OR_RETURN(std::string posix, PosixName(name));
  queue_bytes = RoundUpToPage(queue_bytes);
  data_bytes = RoundUpToPage(data_bytes);
  if (queue_bytes == 0 || data_bytes == 0 || data_bytes > (uint64_t{1} << 40)) {
    return InvalidArgumentError("shared memory " + posix +
                                ": queue memory and data region must be 1 byte to 1 TiB");
  }
  if (replace) shm_unlink(posix.c_str());
  SharedMemory m;
  m.fd_ = shm_open(posix.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (m.fd_ < 0) {
    int e = errno;
    if (e == EEXIST) {
      return AlreadyExistsError("shared memory " + posix +
                                " exists (another controller, or a stale one: --replace)");
    }
    return ErrnoError("creating shared memory " + posix, e);
  }
  m.owner_ = true;
  m.name_ = posix;
  m.queue_offset_ = kRegisterBytes;
  m.queue_bytes_ = queue_bytes;
  m.data_offset_ = kRegisterBytes + queue_bytes;
  m.data_bytes_ = data_bytes;
  m.size_ = m.data_offset_ + data_bytes;
  if (ftruncate(m.fd_, static_cast<off_t>(m.size_)) != 0) {
    return ErrnoError("sizing shared memory " + posix, errno);
  }
  struct stat st {};
  if (fstat(m.fd_, &st) != 0) return ErrnoError("sizing shared memory " + posix, errno);
  m.inode_ = st.st_ino;
  void* p = mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
  if (p == MAP_FAILED) return ErrnoError("mapping shared memory " + posix, errno);
  m.base_ = static_cast<std::byte*>(p);
  SharedMapDescriptor d;
  d.magic = SharedMapDescriptor::kMagic;
  d.version = 1;
  d.total_bytes = m.size_;
  d.queue_offset = m.queue_offset_;
  d.queue_bytes = m.queue_bytes_;
  d.data_offset = m.data_offset_;
  d.data_bytes = m.data_bytes_;
  d.controller_pid = static_cast<uint32_t>(getpid());
  std::memcpy(m.base_ + reg::kSharedMap, &d, sizeof d);
  return m;
}

Result<SharedMemory> SharedMemory::Open(const std::string& name) {
  OC_ASSIGN_OR_RETURN(std::string posix, PosixName(name));
  SharedMemory m;
  m.name_ = posix;
  m.fd_ = shm_open(posix.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (m.fd_ < 0) {
    int e = errno;
    if (e == ENOENT) {
      return NotFoundError("no NVMe-KV controller at shared memory " + posix +
                           " (start one with `objectcache nvme-kv serve`)");
    }
    return ErrnoError("opening shared memory " + posix, e);
  }
  struct stat st {};
  if (fstat(m.fd_, &st) != 0) return ErrnoError("sizing shared memory " + posix, errno);
  m.size_ = static_cast<size_t>(st.st_size);
  m.inode_ = st.st_ino;
  if (m.size_ < kRegisterBytes) {
    return FailedPreconditionError("shared memory " + posix + " is not an NVMe-KV controller's");
  }
  void* p = mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
  if (p == MAP_FAILED) return ErrnoError("mapping shared memory " + posix, errno);
  m.base_ = static_cast<std::byte*>(p);
  SharedMapDescriptor d;
  std::memcpy(&d, m.base_ + reg::kSharedMap, sizeof d);
  bool fits = d.queue_offset >= kRegisterBytes && d.data_offset >= kRegisterBytes &&
              RangeWithin(d.queue_offset, d.queue_bytes, m.size_) &&
              RangeWithin(d.data_offset, d.data_bytes, m.size_) &&
              (d.queue_offset + d.queue_bytes <= d.data_offset ||
               d.data_offset + d.data_bytes <= d.queue_offset);
  if (d.magic != SharedMapDescriptor::kMagic || d.version != 1 || d.total_bytes != m.size_ ||
      !fits) {
    return FailedPreconditionError("shared memory " + posix +
                                   " does not describe an NVMe-KV controller (version 1)");
  }
  m.queue_offset_ = d.queue_offset;
  m.queue_bytes_ = d.queue_bytes;
  m.data_offset_ = d.data_offset;
  m.data_bytes_ = d.data_bytes;
  return m;
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept { *this = std::move(other); }

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    Release();
    name_ = std::move(other.name_);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    queue_offset_ = other.queue_offset_;
    queue_bytes_ = other.queue_bytes_;
    data_offset_ = other.data_offset_;
    data_bytes_ = other.data_bytes_;
    owner_ = std::exchange(other.owner_, false);
    inode_ = other.inode_;
  }
  return *this;
}

SharedMemory::~SharedMemory() { Release(); }

void SharedMemory::Release() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  if (owner_) shm_unlink(name_.c_str());
  base_ = nullptr;
  fd_ = -1;
  owner_ = false;
}

SharedWord<uint32_t> SharedMemory::Register32(size_t offset) const {
  return {*reinterpret_cast<uint32_t*>(base_ + offset), SyncObject(offset)};
}

SharedWord<uint64_t> SharedMemory::Register64(size_t offset) const {
  return {*reinterpret_cast<uint64_t*>(base_ + offset), SyncObject(offset)};
}

SharedWord<uint32_t> SharedMemory::Word32(uint32_t* word) const {
  return {*word, SyncObject(static_cast<size_t>(reinterpret_cast<std::byte*>(word) - base_))};
}

const void* SharedMemory::SyncObject([[maybe_unused]] size_t offset) const {
#ifdef OC_NVMEKV_TSAN
  // Words that share a slot only synchronize more than the memory does, never less.
  static char slots[4096];
  return &slots[(inode_ * 0x9E3779B97F4A7C15u + offset / 4) % sizeof slots];
#else
  return nullptr;
#endif
}

const SharedMapDescriptor& SharedMemory::descriptor() const {
  return *reinterpret_cast<const SharedMapDescriptor*>(base_ + reg::kSharedMap);
}

}  // namespace objectcache::nvmekv
