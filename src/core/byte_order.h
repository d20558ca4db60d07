// Little-endian encoding helpers for on-disk and on-wire records.
//
// Every multi-byte integer ObjectCache writes to disk or the wire is little-endian, whatever
// the host. ByteWriter appends; ByteReader consumes with bounds checks and reports a short
// read instead of reading past the end (bytes from disk or the network are never trusted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace objectcache {

class ByteWriter {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void Zeros(size_t n) { buf_.append(n, '\0'); }

  const char* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  std::string& str() { return buf_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  // Each returns false (and consumes nothing) when fewer bytes remain than asked for.
  bool U8(uint8_t* v) { return Le(v, 1); }
  bool U16(uint16_t* v) { return Le(v, 2); }
  bool U32(uint32_t* v) { return Le(v, 4); }
  bool U64(uint64_t* v) { return Le(v, 8); }
  bool Bytes(void* out, size_t n) {
    if (remaining() < n) return false;
    std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t position() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  template <typename T>
  bool Le(T* v, size_t n) {
    if (remaining() < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i)
      x |= uint64_t{std::to_integer<uint8_t>(in_[pos_ + i])} << (8 * i);
    *v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

inline void StoreLe64(uint64_t v, std::byte* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

}  // namespace objectcache
