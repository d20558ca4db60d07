#include "nvmekv/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

#include "nvmekv/spec.h"

namespace objectcache::nvmekv {
namespace {

// The SIGBUS guard (SharedMemory::resizes): this process's mappings of segments, read by the
// signal handler, so plain atomics in a fixed table.
struct GuardSlot {
  std::atomic<bool> taken{false};
  std::atomic<uintptr_t> base{0};  // 0: not in use
  std::atomic<size_t> size{0};
  std::atomic<int> fd{-1};
  std::atomic<uint64_t> resizes{0};
};
constexpr int kGuardSlots = 256;
GuardSlot guard_slots[kGuardSlots];
struct sigaction previous_sigbus;

// True when the segment's status changed (st_ctime: a resize) less than kResizeRetryNs ago. A
// fault past a cut that finds the size intact means that another thread or process gave the
// size back between the faulting access and this handler's look (the controller's idle check, a
// second worker that faulted too, or a host); the access is retried. A fault that a retry cannot
// cure (no memory for the page) finds no recent change and ends the process, after at most
// kResizeRetryNs of retries when it follows a resize.
bool ResizedJustNow(const struct stat& st) {
  constexpr int64_t kWindow = SharedMemory::kResizeRetryNs;
  struct timespec now {};
  if (clock_gettime(CLOCK_REALTIME, &now) != 0) return false;
  const int64_t age_ns = (int64_t{now.tv_sec} - st.st_ctim.tv_sec) * 1'000'000'000 +
                         (now.tv_nsec - st.st_ctim.tv_nsec);
  // A ctime as far ahead of the clock (the clock stepped back) counts as recent too.
  return age_ns > -kWindow && age_ns < kWindow;
}

// A fault in a guarded mapping whose segment a host shrank: the segment gets its size back and
// the access is retried. Anything else ends the process as it would have without the guard.
void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const int saved_errno = errno;
  for (GuardSlot& slot : guard_slots) {
    const uintptr_t base = slot.base.load(std::memory_order_acquire);
    const size_t size = slot.size.load(std::memory_order_acquire);
    if (base == 0 || addr < base || addr - base >= size) continue;
    const int fd = slot.fd.load(std::memory_order_acquire);
    struct stat st {};
    if (info->si_code != BUS_ADRERR || fstat(fd, &st) != 0) break;  // a memory error, say
    if (static_cast<uint64_t>(st.st_size) < size) {
      if (ftruncate(fd, static_cast<off_t>(size)) != 0) break;
      slot.resizes.fetch_add(1, std::memory_order_release);
      errno = saved_errno;
      return;
    }
    if (!ResizedJustNow(st)) break;
    errno = saved_errno;
    return;
  }
  if (previous_sigbus.sa_flags & SA_SIGINFO) {
    previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN) {
    previous_sigbus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // delivered again when this handler returns
  raise(SIGBUS);
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &previous_sigbus);
  });
}

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
  // A sparse segment larger than /dev/shm can hold would fail at the first write past its free
  // space, with SIGBUS in whichever process wrote; its pages are taken now instead (after a
  // look at the free space, so that a segment far too large is not allocated up to the limit).
  struct statvfs fs {};
  if (fstatvfs(m.fd_, &fs) == 0 && uint64_t{fs.f_bavail} * fs.f_frsize < m.size_) {
    return ResourceExhaustedError("shared memory " + posix + ": " + std::to_string(m.size_) +
                                  " bytes do not fit the " +
                                  std::to_string(uint64_t{fs.f_bavail} * fs.f_frsize) +
                                  " bytes free in /dev/shm (a smaller --data-size?)");
  }
  if (const int e = posix_fallocate(m.fd_, 0, static_cast<off_t>(m.size_)); e != 0) {
    return ErrnoError(
        "reserving the " + std::to_string(m.size_) + " bytes of shared memory " + posix, e);
  }
  struct stat st {};
  if (fstat(m.fd_, &st) != 0) return ErrnoError("sizing shared memory " + posix, errno);
  m.inode_ = st.st_ino;
  void* p = mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
  if (p == MAP_FAILED) return ErrnoError("mapping shared memory " + posix, errno);
  m.base_ = static_cast<std::byte*>(p);
  m.controller_pid_ = static_cast<uint32_t>(getpid());
  m.WriteDescriptor();
  m.Guard();
  return m;
}

void SharedMemory::WriteDescriptor() {
  SharedMapDescriptor d;
  d.magic = SharedMapDescriptor::kMagic;
  d.version = 1;
  d.total_bytes = size_;
  d.queue_offset = queue_offset_;
  d.queue_bytes = queue_bytes_;
  d.data_offset = data_offset_;
  d.data_bytes = data_bytes_;
  d.controller_pid = controller_pid_;
  std::memcpy(base_ + reg::kSharedMap, &d, sizeof d);
}

void SharedMemory::Guard() {
  InstallSigbusGuard();
  for (int i = 0; i < kGuardSlots; ++i) {
    GuardSlot& slot = guard_slots[i];
    if (slot.taken.exchange(true)) continue;
    slot.fd.store(fd_, std::memory_order_release);
    slot.size.store(size_, std::memory_order_release);
    slot.resizes.store(0, std::memory_order_release);
    slot.base.store(reinterpret_cast<uintptr_t>(base_), std::memory_order_release);
    guard_slot_ = i;
    return;
  }
}

uint64_t SharedMemory::resizes() const {
  return guard_slot_ < 0 ? 0 : guard_slots[guard_slot_].resizes.load(std::memory_order_acquire);
}

bool SharedMemory::Restore() {
  bool changed = false;
  struct stat st {};
  if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) != size_) {
    changed = ftruncate(fd_, static_cast<off_t>(size_)) == 0;
  }
  if (owner_) {
    SharedMapDescriptor now;
    std::memcpy(&now, base_ + reg::kSharedMap, sizeof now);
    if (now.magic != SharedMapDescriptor::kMagic || now.total_bytes != size_ ||
        now.queue_offset != queue_offset_ || now.queue_bytes != queue_bytes_ ||
        now.data_offset != data_offset_ || now.data_bytes != data_bytes_ || now.version != 1 ||
        now.controller_pid != controller_pid_) {
      WriteDescriptor();
      changed = true;
    }
  }
  return changed;
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
  m.controller_pid_ = d.controller_pid;
  m.Guard();
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
    controller_pid_ = other.controller_pid_;
    guard_slot_ = std::exchange(other.guard_slot_, -1);
  }
  return *this;
}

SharedMemory::~SharedMemory() { Release(); }

void SharedMemory::Release() {
  if (guard_slot_ >= 0) {
    GuardSlot& slot = guard_slots[guard_slot_];
    slot.base.store(0, std::memory_order_release);
    slot.fd.store(-1, std::memory_order_release);
    slot.taken.store(false, std::memory_order_release);
    guard_slot_ = -1;
  }
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
