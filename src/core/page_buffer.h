// Memory for the kernel to copy file and socket bytes into: zeroed, and starting `offset` bytes
// past a page boundary (0 unless asked otherwise).
//
// Why not a std::string: glibc serves large blocks from mmap at 16 bytes past a page boundary,
// and on this project's AMD EPYC machines the kernel's copy into a destination 1 to 31 bytes
// past a page boundary runs at under half its speed (recv of page-cache pages: 0.58-0.63 CPU
// s/GiB against 0.20-0.22 at offsets 0, 32, 48 or 4080; docs/decisions.md).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

namespace objectcache {

inline constexpr size_t kPageBytes = 4096;

class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(size_t bytes, size_t offset = 0)
      : block_(Allocate(offset + bytes)), data_(block_.get() + offset), size_(bytes) {
    std::memset(data_, 0, bytes);
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

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  static std::byte* Allocate(size_t bytes) {
    // aligned_alloc wants a multiple of the alignment.
    const size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
    void* p = std::aligned_alloc(kPageBytes, rounded == 0 ? kPageBytes : rounded);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<std::byte*>(p);
  }

  std::unique_ptr<std::byte, Free> block_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace objectcache
