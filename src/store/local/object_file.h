// The local store's object file (docs/local-store.md): its name in a shard directory, its
// trailer (the key, then a 40-byte footer with the payload's length and checksum), and its
// attributes (an extended attribute with a checksum of its own). Encoding and checking only:
// anything inconsistent is DataLoss, so a damaged file is reported and never served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "objectcache/status.h"

namespace objectcache::local {

inline constexpr size_t kFooterBytes = 40;

// The disk space an object's file takes as a store's capacity counts it: payload, name and
// footer, rounded up to 4 KiB blocks (so a flood of tiny objects fills the capacity as fast as
// it fills the disk). Saturates at UINT64_MAX.
inline uint64_t ObjectFileFootprint(uint64_t payload, size_t key_bytes) {
  constexpr uint64_t kBlock = 4096;
  uint64_t bytes = 0;
  if (__builtin_add_overflow(payload, uint64_t{key_bytes}, &bytes) ||
      __builtin_add_overflow(bytes, kFooterBytes + kBlock - 1, &bytes)) {
    return UINT64_MAX;
  }
  return bytes / kBlock * kBlock;
}

// Longer encoded names are replaced by "~" and a hash of the name (the key is in the trailer).
inline constexpr size_t kMaxPlainFileName = 200;

// The characters a file name carries as they are; every other byte is %XX.
bool IsPlainNameChar(char c);

// Inverse of LocalStoreFileName (local_store.h) for plain (not hashed) names; nullopt for
// anything else.
std::optional<std::string> DecodeFileName(std::string_view name);

// The trailer that follows the payload of an object file for `key`.
std::string MakeTrailer(std::string_view key, uint64_t payload_len, uint64_t payload_checksum);

struct Trailer {
  std::string key;
  uint64_t payload_len = 0;
  uint64_t payload_checksum = 0;
};

// Reads and checks the trailer of an object file of `file_size` bytes. With `expect_key`, the
// trailer must name that key. DataLoss on anything inconsistent.
Result<Trailer> ReadTrailer(int fd, uint64_t file_size, std::optional<std::string_view> expect_key);

// Attributes live in an extended attribute of the object file, set before the rename that
// publishes it, so they appear and change atomically with the value. The stored value is the
// attributes followed by XXH3-64(key || attributes).
// Sets them on an open file; 0 or the errno.
int WriteAttributesXattr(int fd, std::string_view key, std::string_view attributes);

// The attributes of an open file for `key`: empty when it has none, DataLoss when their
// checksum does not match.
Result<std::string> GetAttributes(int fd, std::string_view key);

}  // namespace objectcache::local
