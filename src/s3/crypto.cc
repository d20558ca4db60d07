#include "s3/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace objectcache::s3 {

struct Digest::Ctx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(ctx); }
};

namespace {
const EVP_MD* Md(Digest::Kind kind) {
  return kind == Digest::Kind::kMd5 ? EVP_md5() : EVP_sha256();
}
}  // namespace

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

std::string HmacSha256(std::string_view key, std::string_view bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string ToHex(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(raw.size() * 2, '0');
  for (size_t i = 0; i < raw.size(); ++i) {
    auto b = static_cast<unsigned char>(raw[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 0xf];
  }
  return out;
}

bool DecodeHexDigest(std::string_view hex, std::string* raw) {
  if (hex.size() % 2 != 0) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  raw->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    *raw += static_cast<char>(hi << 4 | lo);
  }
  return true;
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
