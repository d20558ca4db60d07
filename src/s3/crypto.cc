#include "s3/crypto.h"

#include <array>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "core/hex.h"

namespace objectcache::s3 {

struct Digest::Ctx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(ctx); }
};

namespace {
const EVP_MD* Md(Digest::Kind kind) {
  switch (kind) {
    case Digest::Kind::kMd5:
      return EVP_md5();
    case Digest::Kind::kSha1:
      return EVP_sha1();
    case Digest::Kind::kSha256:
      break;
  }
  return EVP_sha256();
}

// Reflected CRC tables: IEEE 802.3 (crc32), Castagnoli (crc32c), and NVMe's CRC-64 (crc64nvme,
// polynomial 0xad93d23594c93659, reflected).
template <typename Word>
constexpr std::array<Word, 256> CrcTable(Word polynomial) {
  std::array<Word, 256> t{};
  for (Word i = 0; i < 256; ++i) {
    Word c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? polynomial ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32Table = CrcTable<uint32_t>(0xedb88320u);
constexpr std::array<uint32_t, 256> kCrc32cTable = CrcTable<uint32_t>(0x82f63b78u);
constexpr std::array<uint64_t, 256> kCrc64NvmeTable = CrcTable<uint64_t>(0x9a6c9329ac4bc9b5u);

template <typename Word>
Word UpdateCrc(const std::array<Word, 256>& table, Word c, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) c = table[(c ^ static_cast<uint8_t>(b)) & 0xff] ^ (c >> 8);
  return c;
}
}  // namespace

PayloadChecksum::PayloadChecksum(Kind kind, std::string header)
    : kind_(kind), header_(std::move(header)) {
  if (kind_ == Kind::kSha1) digest_ = std::make_shared<Digest>(Digest::Kind::kSha1);
  if (kind_ == Kind::kSha256) digest_ = std::make_shared<Digest>(Digest::Kind::kSha256);
}

std::optional<PayloadChecksum> PayloadChecksum::ForHeader(std::string_view name) {
  if (name == "x-amz-checksum-crc32") return PayloadChecksum(Kind::kCrc32, std::string(name));
  if (name == "x-amz-checksum-crc32c") return PayloadChecksum(Kind::kCrc32c, std::string(name));
  if (name == "x-amz-checksum-crc64nvme")
    return PayloadChecksum(Kind::kCrc64Nvme, std::string(name));
  if (name == "x-amz-checksum-sha1") return PayloadChecksum(Kind::kSha1, std::string(name));
  if (name == "x-amz-checksum-sha256") return PayloadChecksum(Kind::kSha256, std::string(name));
  return std::nullopt;
}

void PayloadChecksum::Update(std::span<const std::byte> bytes) {
  switch (kind_) {
    case Kind::kCrc32:
      crc32_ = UpdateCrc(kCrc32Table, crc32_, bytes);
      break;
    case Kind::kCrc32c:
      crc32_ = UpdateCrc(kCrc32cTable, crc32_, bytes);
      break;
    case Kind::kCrc64Nvme:
      crc64_ = UpdateCrc(kCrc64NvmeTable, crc64_, bytes);
      break;
    case Kind::kSha1:
    case Kind::kSha256:
      digest_->Update(bytes);
      break;
  }
}

std::string PayloadChecksum::FinishBase64() {
  if (digest_) return Base64Encode(digest_->Finish());
  // The CRC, big-endian, in as many bytes as it has.
  const bool wide = kind_ == Kind::kCrc64Nvme;
  const uint64_t v = wide ? ~crc64_ : uint64_t{~crc32_};
  crc32_ = ~uint32_t{0};
  crc64_ = ~uint64_t{0};
  const int bytes = wide ? 8 : 4;
  std::string raw(bytes, '\0');
  for (int i = 0; i < bytes; ++i) raw[i] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
  return Base64Encode(raw);
}

Digest::Digest(Kind kind) : ctx_(std::make_unique<Ctx>()), kind_(kind) {
  EVP_DigestInit_ex(ctx_->ctx, Md(kind_), nullptr);
}

Digest::~Digest() = default;

void Digest::Update(std::string_view bytes) {
  EVP_DigestUpdate(ctx_->ctx, bytes.data(), bytes.size());
}

std::string Digest::Finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->ctx, out, &len);
  EVP_DigestInit_ex(ctx_->ctx, Md(kind_), nullptr);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Sha256(std::string_view bytes) {
  Digest d(Digest::Kind::kSha256);
  d.Update(bytes);
  return d.Finish();
}

std::string Md5(std::string_view bytes) {
  Digest d(Digest::Kind::kMd5);
  d.Update(bytes);
  return d.Finish();
}

namespace {
std::string Hmac(const EVP_MD* md, std::string_view key, std::string_view bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(md, key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}
}  // namespace

std::string HmacSha256(std::string_view key, std::string_view bytes) {
  return Hmac(EVP_sha256(), key, bytes);
}

std::string HmacSha1(std::string_view key, std::string_view bytes) {
  return Hmac(EVP_sha1(), key, bytes);
}

std::string ToHex(std::string_view raw) {
  return EncodeHex(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

bool DecodeHexDigest(std::string_view hex, std::string* raw) {
  raw->assign(hex.size() / 2, '\0');
  return DecodeHex(hex, reinterpret_cast<uint8_t*>(raw->data()));
}

std::string Base64Encode(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()),
                          static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

bool Base64Decode(std::string_view text, std::string* out) {
  if (text.size() % 4 != 0) return false;
  std::string buf(3 * (text.size() / 4) + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(buf.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return false;
  // EVP_DecodeBlock counts padding as zero bytes.
  size_t len = static_cast<size_t>(n);
  if (!text.empty() && text.back() == '=') len--;
  if (text.size() >= 2 && text[text.size() - 2] == '=') len--;
  buf.resize(len);
  *out = std::move(buf);
  return true;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    std::abort();  // the OS CSPRNG failing is not a condition we can serve through
  }
  return ToHex(raw);
}

}  // namespace objectcache::s3
