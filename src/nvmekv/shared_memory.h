// The memory an NVMe-KV controller shares with its host: one POSIX shared-memory segment holding
// a register page laid out like BAR0 (with the doorbells), the queue memory and the data region.
// Addresses in commands are offsets: queue bases into the queue memory, data pointers into the
// data region (our stand-in for DMA addresses; docs/nvme-kv.md). The controller creates the
// segment and describes it at reg::kSharedMap; a host opens it by name.
//
// Registers, doorbells and completion phase words are read and written with atomics (SharedWord,
// from Register32/64 and Word32); the controller treats every byte of the segment as untrusted
// input. A SharedMemory is move-only and not thread-safe itself; the memory it maps is shared by
// design.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "nvmekv/spec.h"
#include "objectcache/status.h"

#if defined(__SANITIZE_THREAD__)
#define OC_NVMEKV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OC_NVMEKV_TSAN 1
#endif
#endif
#ifdef OC_NVMEKV_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace objectcache::nvmekv {

inline constexpr size_t kRegisterBytes = 16384;  // BAR0: registers, then doorbells from 0x1000
inline constexpr uint32_t kDoorbellStride = 4;   // CAP.DSTRD: 4 << 4 = 64 bytes, one cache line
inline constexpr uint16_t kMaxQueues = 64;       // admin + I/O queues whose doorbells fit

// At reg::kSharedMap; written once by the controller before it is visible under its name.
struct SharedMapDescriptor {
  static constexpr uint32_t kMagic = 0x4B4E434F;  // "OCNK"
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t total_bytes = 0;
  uint64_t queue_offset = 0;
  uint64_t queue_bytes = 0;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
  uint32_t controller_pid = 0;
  uint32_t reserved = 0;
};

// One atomic word of the segment. Under ThreadSanitizer each store also releases, and each load
// acquires, a sync object named by the word's segment and offset: TSan follows release and
// acquire by virtual address, and a host in the controller's own process (the tests) maps the
// segment at a second address, so without this TSan misses the ordering the memory provides and
// reports the data handed over behind a doorbell or a completion as a race. Elsewhere it is a
// plain std::atomic_ref.
template <typename T>
class SharedWord {
 public:
  SharedWord(T& word, const void* sync) : ref_(word), sync_(sync) {}
  T load(std::memory_order order = std::memory_order_seq_cst) const {
    T v = ref_.load(order);
#ifdef OC_NVMEKV_TSAN
    __tsan_acquire(const_cast<void*>(sync_));
#endif
    return v;
  }
  void store(T v, std::memory_order order = std::memory_order_seq_cst) const {
#ifdef OC_NVMEKV_TSAN
    __tsan_release(const_cast<void*>(sync_));
#endif
    ref_.store(v, order);
  }

 private:
  std::atomic_ref<T> ref_;
  [[maybe_unused]] const void* sync_;
};

class SharedMemory {
 public:
  // Creates /NAME (NAME without slashes) sized for the register page, `queue_bytes` of queue
  // memory and `data_bytes` of data region (each rounded up to a page). AlreadyExists when the
  // name is taken, unless `replace` (then the old segment is unlinked first: hosts that still
  // map it keep the old memory). The segment is unlinked when this object is destroyed.
  static Result<SharedMemory> Create(const std::string& name, size_t queue_bytes, size_t data_bytes,
                                     bool replace);
  // Maps an existing segment and checks its descriptor. NotFound when there is none.
  static Result<SharedMemory> Open(const std::string& name);

  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  ~SharedMemory();

  SharedWord<uint32_t> Register32(size_t offset) const;
  SharedWord<uint64_t> Register64(size_t offset) const;
  // The 32-bit word at `word`, which lies in this mapping (a completion entry's phase word).
  SharedWord<uint32_t> Word32(uint32_t* word) const;
  const SharedMapDescriptor& descriptor() const;
  std::span<std::byte> queue_memory() const { return {base_ + queue_offset_, queue_bytes_}; }
  std::span<std::byte> data_region() const { return {base_ + data_offset_, data_bytes_}; }
  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

  // A host can resize the segment (ftruncate) under the mappings of everyone else; a read or
  // write past its new end would raise SIGBUS and end the process. Every mapping is guarded
  // instead: the fault gives the segment its size back (zeros past the cut) and the access
  // goes on, counted here. The controller then calls Restore and fails the host. A fault that
  // finds the size already given back (by another thread or process) is retried while the
  // segment changed (st_ctime) less than kResizeRetryNs ago; after that it ends the process.
  uint64_t resizes() const;
  static constexpr int64_t kResizeRetryNs = 1'000'000'000;
  // Gives the segment back its size (when a host shrank or grew it) and, in the controller's
  // mapping, its descriptor. True when anything had changed.
  bool Restore();

 private:
  SharedMemory() = default;
  void Release();
  void WriteDescriptor();
  // Registers this mapping with the SIGBUS guard (shared_memory.cc); false when every slot is
  // taken (the mapping then goes unguarded).
  void Guard();
  // ThreadSanitizer's sync object for the word at `offset` (null in other builds).
  const void* SyncObject(size_t offset) const;

  std::string name_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  size_t size_ = 0;
  size_t queue_offset_ = 0, queue_bytes_ = 0, data_offset_ = 0, data_bytes_ = 0;
  bool owner_ = false;
  uint64_t inode_ = 0;  // the segment's identity in every mapping of it (SyncObject)
  uint32_t controller_pid_ = 0;
  int guard_slot_ = -1;
};

inline size_t RoundUpToPage(size_t n) { return (n + kPageBytes - 1) / kPageBytes * kPageBytes; }
// Queue memory for one submission and one completion queue of `entries` each, every queue page
// aligned: what the controller reserves per queue pair and what the host lays out.
inline size_t QueuePairBytes(size_t entries) {
  return RoundUpToPage(entries * kSubmissionEntryBytes) +
         RoundUpToPage(entries * kCompletionEntryBytes);
}

// In bounds: [offset, offset + length) lies within a region of `size` bytes, without overflow.
inline bool RangeWithin(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace objectcache::nvmekv
