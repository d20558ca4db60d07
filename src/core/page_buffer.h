// Memory for the kernel to copy file and socket bytes into: zeroed, and starting `offset` bytes
// past a page boundary (0 unless asked otherwise).
//
// Blocks of kMappedBufferBytes or more are mapped from the kernel, either resident from the
// start (MAP_POPULATE; with OBJECTCACHE_PREFAULT=1 in the environment, which the benchmarks set,
// also every page written once by the kernel and once by the process, see Prefault: a
// destination an engine writes into is memory it already has, and a timed receive should not
// fault its pages in), or, with Pages::kOnFirstWrite, each page zeroed and made
// resident when first written: a buffer that may never be written in full (a layerwise read
// window whose slices stay in the store's own memory) then costs only the pages written, and is
// never zeroed twice (the memset of a 32 MiB window per response had been 8% of the RADOS
// gateway's CPU, perf).
//
// Why not a std::string: glibc serves large blocks from mmap at 16 bytes past a page boundary,
// and on this project's AMD EPYC machines the kernel's copy into a destination 1 to 31 bytes
// past a page boundary runs at under half its speed (recv of page-cache pages: 0.58-0.63 CPU
// s/GiB against 0.20-0.22 at offsets 0, 32, 48 or 4080; docs/decisions.md).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

namespace objectcache {

inline constexpr size_t kPageBytes = 4096;
inline constexpr size_t kMappedBufferBytes = 256 << 10;

// Frees a PageBuffer block as it was allocated: unmapped (`mapped` bytes) or freed.
struct PageBlockFree {
  size_t mapped = 0;
  void operator()(std::byte* p) const {
    if (mapped > 0) {
      ::munmap(p, mapped);
    } else {
      std::free(p);
    }
  }
};

class PageBuffer {
 public:
  enum class Pages { kResident, kOnFirstWrite };

  PageBuffer() = default;
  explicit PageBuffer(size_t bytes, size_t offset = 0, Pages pages = Pages::kResident)
      : block_(Allocate(offset + bytes, pages)) {
    data_ = block_.get() + offset;
    size_ = bytes;
    if (!block_.get_deleter().mapped) std::memset(data_, 0, bytes);
  }
  PageBuffer(PageBuffer&& other) noexcept
      : block_(std::move(other.block_)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  PageBuffer& operator=(PageBuffer&& other) noexcept {
    block_ = std::move(other.block_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

  // Whether the block is mapped from the kernel (kMappedBufferBytes or more) rather than
  // allocated; only a mapped one can be cut down.
  bool mapped() const { return block_.get_deleter().mapped > 0; }

  // Cuts a mapped buffer down to its first `bytes`: the pages past them are unmapped, so it
  // holds no more memory than a new buffer of `bytes` would. False (unchanged) when the buffer
  // is not mapped or holds fewer than `bytes`.
  bool ShrinkTo(size_t bytes) {
    if (!mapped() || bytes > size_) return false;
    const size_t offset = static_cast<size_t>(data_ - block_.get());
    const size_t keep = std::max(kPageBytes, RoundUpToPages(offset + bytes));  // one at least
    size_t& mapped_bytes = block_.get_deleter().mapped;
    if (keep < mapped_bytes) {
      ::munmap(block_.get() + keep, mapped_bytes - keep);
      mapped_bytes = keep;
    }
    size_ = bytes;
    return true;
  }

 private:
  using Block = std::unique_ptr<std::byte, PageBlockFree>;
  static size_t RoundUpToPages(size_t bytes) {
    return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  // Makes every page of a fresh mapping ready for the kernel's copies and the process's own
  // accesses. MAP_POPULATE makes the pages resident in the guest, but under a hypervisor with
  // shadow page tables (this project's machines run under PVM) the first access to each page
  // through the process's addresses still traps, and the kernel's view and the process's view
  // trap separately: the first pread of 256 MiB of a cached file into fresh populated memory ran
  // at 6 Gbit/s against 125 the second time; a store to every page from user space beforehand
  // left it at 6, a read from /dev/zero into the memory beforehand made it 125 (2026-12-03). So the
  // kernel writes zeros once through the process's addresses, and the process stores a zero in
  // every page: the traps are paid here, not in a timed receive.
  // That costs a pass over the memory on every allocation and helps only under such a
  // hypervisor, so it is opt-in: OBJECTCACHE_PREFAULT=1 in the environment (read once).
  static bool PrefaultWanted() {
    static const bool wanted = [] {
      const char* v = std::getenv("OBJECTCACHE_PREFAULT");
      return v != nullptr && std::strcmp(v, "1") == 0;
    }();
    return wanted;
  }
  static void Prefault(std::byte* p, size_t bytes) {
    const int zero = ::open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (zero >= 0) {
      for (size_t at = 0; at < bytes;) {
        const ssize_t n = ::read(zero, p + at, bytes - at);
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
      ::close(zero);
    }
    for (size_t at = 0; at < bytes; at += kPageBytes) {
      *static_cast<volatile std::byte*>(p + at) = std::byte{0};
    }
  }
  static Block Allocate(size_t bytes, Pages pages) {
    // Whole pages: aligned_alloc wants a multiple of the alignment, mmap maps pages.
    const size_t rounded = bytes == 0 ? kPageBytes : RoundUpToPages(bytes);
    if (rounded >= kMappedBufferBytes) {
      const int populate = pages == Pages::kResident ? MAP_POPULATE : 0;
      void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | populate, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      if (populate != 0 && PrefaultWanted()) Prefault(static_cast<std::byte*>(p), rounded);
      return Block(static_cast<std::byte*>(p), PageBlockFree{rounded});
    }
    void* p = std::aligned_alloc(kPageBytes, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return Block(static_cast<std::byte*>(p), PageBlockFree{});
  }

  Block block_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace objectcache
