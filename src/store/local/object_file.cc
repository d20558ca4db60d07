#include "store/local/object_file.h"

#include <sys/xattr.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "core/byte_order.h"
#include "core/hex.h"
#include "objectcache/store.h"
#include "store/local/local_store.h"
#include "store/local/posix_io.h"

namespace objectcache {
namespace local {
namespace {

constexpr char kFooterMagic[8] = {'O', 'C', 'L', 'S', 'O', 'B', 'J', '1'};
constexpr uint16_t kFooterVersion = 1;
constexpr char kAttributesXattr[] = "user.objectcache.attrs";

uint64_t AttributesChecksum(std::string_view key, std::string_view attributes) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, key.data(), key.size());
  XXH3_64bits_update(&st, attributes.data(), attributes.size());
  return XXH3_64bits_digest(&st);
}

}  // namespace

bool IsPlainNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

std::optional<std::string> DecodeFileName(std::string_view name) {
  std::string key;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%') {
      uint8_t byte;
      if (i + 2 >= name.size()) return std::nullopt;
      if (!DecodeHex(name.substr(i + 1, 2), &byte)) return std::nullopt;
      key.push_back(static_cast<char>(byte));
      i += 2;
    } else if (IsPlainNameChar(name[i])) {
      key.push_back(name[i]);
    } else {
      return std::nullopt;
    }
  }
  if (key.empty() || key.size() > kMaxKeyBytes || LocalStoreFileName(key) != name) {
    return std::nullopt;
  }
  return key;
}

std::string MakeTrailer(std::string_view key, uint64_t payload_len, uint64_t payload_checksum) {
  ByteWriter w;
  w.Bytes(key.data(), key.size());
  w.Bytes(kFooterMagic, sizeof(kFooterMagic));
  w.U64(payload_len);
  w.U64(payload_checksum);
  w.U32(static_cast<uint32_t>(key.size()));
  w.U16(kFooterVersion);
  w.U16(0);
  w.U64(XXH3_64bits(w.data(), w.size()));
  return std::move(w.str());
}

Result<Trailer> ReadTrailer(int fd, uint64_t file_size,
                            std::optional<std::string_view> expect_key) {
  auto damaged = [](const std::string& why) {
    return DataLossError("damaged object file: " + why);
  };
  size_t key_len = expect_key ? expect_key->size() : 0;
  if (!expect_key) {
    // Learn the key length from the footer first.
    std::array<std::byte, kFooterBytes> footer;
    if (file_size < kFooterBytes) return damaged("shorter than its footer");
    if (int e = PreadAll(fd, footer, file_size - kFooterBytes); e != 0) {
      return e < 0 ? damaged("short read") : ErrnoError("reading object footer", e);
    }
    ByteReader r(std::span<const std::byte>(footer).subspan(24));
    uint32_t k = 0;
    (void)r.U32(&k);
    if (k == 0 || k > kMaxKeyBytes) return damaged("bad key length");
    key_len = k;
  }
  const size_t trailer_len = key_len + kFooterBytes;
  if (file_size < trailer_len) return damaged("shorter than its trailer");
  std::string buf(trailer_len, '\0');
  if (int e = PreadAll(fd, AsWritableBytes(buf), file_size - trailer_len); e != 0) {
    return e < 0 ? damaged("short read") : ErrnoError("reading object trailer", e);
  }
  ByteReader r(AsBytes(buf).subspan(key_len));
  char magic[8];
  Trailer t;
  uint32_t stored_key_len = 0;
  uint16_t version = 0, flags = 0;
  uint64_t checksum = 0;
  (void)r.Bytes(magic, 8);
  (void)r.U64(&t.payload_len);
  (void)r.U64(&t.payload_checksum);
  (void)r.U32(&stored_key_len);
  (void)r.U16(&version);
  (void)r.U16(&flags);
  (void)r.U64(&checksum);
  if (std::memcmp(magic, kFooterMagic, 8) != 0) return damaged("bad footer magic");
  if (XXH3_64bits(buf.data(), trailer_len - 8) != checksum) return damaged("footer checksum");
  if (version != kFooterVersion || flags != 0 || stored_key_len != key_len) {
    return damaged("unknown footer version");
  }
  if (t.payload_len != file_size - trailer_len) return damaged("size does not match footer");
  t.key = buf.substr(0, key_len);
  if (expect_key && t.key != *expect_key) return damaged("footer names another key");
  return t;
}

int WriteAttributesXattr(int fd, std::string_view key, std::string_view attributes) {
  ByteWriter w;
  w.Bytes(attributes.data(), attributes.size());
  w.U64(AttributesChecksum(key, attributes));
  return ::fsetxattr(fd, kAttributesXattr, w.data(), w.size(), 0) == 0 ? 0 : errno;
}

Result<std::string> GetAttributes(int fd, std::string_view key) {
  std::string buf(kMaxAttributeBytes + 8, '\0');
  ssize_t n = ::fgetxattr(fd, kAttributesXattr, buf.data(), buf.size());
  if (n < 0) {
    if (errno == ENODATA || errno == ENOTSUP) return std::string();
    return ErrnoError("reading attributes", errno);
  }
  if (n < 8) return DataLossError("damaged attributes");
  buf.resize(static_cast<size_t>(n));
  uint64_t stored = 0;
  ByteReader r(AsBytes(buf).subspan(buf.size() - 8));
  (void)r.U64(&stored);
  buf.resize(buf.size() - 8);
  if (AttributesChecksum(key, buf) != stored) return DataLossError("attributes checksum mismatch");
  return buf;
}

}  // namespace local

std::string LocalStoreFileName(std::string_view key) {
  using local::IsPlainNameChar, local::kMaxPlainFileName;
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    char c = key[i];
    if (IsPlainNameChar(c) && !(i == 0 && c == '.')) {
      name.push_back(c);
    } else {
      uint8_t b = static_cast<uint8_t>(c);
      name.push_back('%');
      name.push_back(kDigits[b >> 4]);
      name.push_back(kDigits[b & 0xf]);
    }
    if (name.size() > kMaxPlainFileName) break;
  }
  if (name.size() > kMaxPlainFileName) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(key.data(), key.size()));
    return "~" + EncodeHex(c.digest, sizeof(c.digest));
  }
  return name;
}

}  // namespace objectcache
