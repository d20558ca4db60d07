// Digests and MACs the S3 protocol needs (OpenSSL libcrypto): SHA-256 and HMAC-SHA256 for
// SigV4, MD5 for ETags and Content-MD5, base64 and hex text forms.
//
// Digest objects are single-threaded; the free functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace objectcache::s3 {

// Incremental digest over a stream of bytes.
class Digest {
 public:
  enum class Kind { kMd5, kSha256, kSha1 };
  explicit Digest(Kind kind);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void Update(std::string_view bytes);
  void Update(std::span<const std::byte> bytes) {
    Update(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  // The raw digest; the object is reset and can be reused.
  std::string Finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  Kind kind_;
};

// S3's additional checksums (x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1, -sha256), sent
// as a header or as a trailer of an aws-chunked body: the algorithm a header names, computed
// over the payload, in the base64 form S3 compares (big-endian for the CRCs).
class PayloadChecksum {
 public:
  // nullopt for a name that is not an x-amz-checksum-* header naming one of those.
  static std::optional<PayloadChecksum> ForHeader(std::string_view lowercase_name);

  void Update(std::span<const std::byte> bytes);
  std::string FinishBase64();
  const std::string& header() const { return header_; }

 private:
  enum class Kind { kCrc32, kCrc32c, kCrc64Nvme, kSha1, kSha256 };
  PayloadChecksum(Kind kind, std::string header);
  Kind kind_;
  std::string header_;
  uint32_t crc32_ = ~uint32_t{0};   // crc32 and crc32c
  uint64_t crc64_ = ~uint64_t{0};   // crc64nvme
  std::shared_ptr<Digest> digest_;  // for the SHA kinds
};

std::string Sha256(std::string_view bytes);
std::string Md5(std::string_view bytes);
std::string HmacSha256(std::string_view key, std::string_view bytes);
std::string HmacSha1(std::string_view key, std::string_view bytes);  // SigV2

std::string ToHex(std::string_view raw);
// Hex digits (either case) to raw bytes; false on anything else.
bool DecodeHexDigest(std::string_view hex, std::string* raw);
std::string Base64Encode(std::string_view raw);
// Empty optional on malformed input.
bool Base64Decode(std::string_view text, std::string* out);

// Compares in time independent of where the inputs differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Random bytes from the OS CSPRNG, as hex.
std::string RandomHex(size_t bytes);

}  // namespace objectcache::s3
