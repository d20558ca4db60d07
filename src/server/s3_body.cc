#include "server/s3_body.h"

#include <cctype>

#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "s3/crypto.h"
#include "server/s3_handler.h"  // Fail

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

namespace {

// The body is as long as its Content-Length said (a body without one, chunked by HTTP, has
// only the server's size limit).
class LengthVerifier final : public BodyVerifier {
 public:
  explicit LengthVerifier(uint64_t expected) : expected_(expected) {}
  S3Result<void> Update(std::span<const std::byte>) override { return {}; }
  S3Result<void> Finish(uint64_t total) override {
    if (total != expected_) {
      return Fail("IncompleteBody",
                  "You did not provide the number of bytes specified by the Content-Length");
    }
    return {};
  }

 private:
  uint64_t expected_;
};

// The payload's SHA-256 is the one x-amz-content-sha256 names (which the signature covers).
class Sha256Verifier final : public BodyVerifier {
 public:
  explicit Sha256Verifier(std::string expected_hex) : expected_(std::move(expected_hex)) {}
  S3Result<void> Update(std::span<const std::byte> payload) override {
    sha_.Update(payload);
    return {};
  }
  S3Result<void> Finish(uint64_t) override {
    if (ToHex(sha_.Finish()) != expected_) {
      return Fail("XAmzContentSHA256Mismatch",
                  "The provided 'x-amz-content-sha256' header does not match what was computed.");
    }
    return {};
  }

 private:
  Digest sha_{Digest::Kind::kSha256};
  std::string expected_;
};

// The checksum an x-amz-checksum-* header gives of the whole payload.
class HeaderChecksumVerifier final : public BodyVerifier {
 public:
  HeaderChecksumVerifier(PayloadChecksum checksum, std::string expected_base64)
      : checksum_(std::move(checksum)), expected_(std::move(expected_base64)) {}
  S3Result<void> Update(std::span<const std::byte> payload) override {
    checksum_.Update(payload);
    return {};
  }
  S3Result<void> Finish(uint64_t) override {
    if (checksum_.FinishBase64() != expected_) {
      return Fail("BadDigest", "The " + checksum_.header() +
                                   " you specified did not match the calculated checksum.");
    }
    return {};
  }

 private:
  PayloadChecksum checksum_;
  std::string expected_;
};

// A KV bucket's object is a valid chunk object of the bucket's layout for the key it is named by.
class ChunkObjectVerifier final : public BodyVerifier {
 public:
  ChunkObjectVerifier(const KvLayout& layout, ChunkKey key, std::optional<uint64_t> object_bytes)
      : key_(key),
        verifier_(ChunkExpectation{.layout = &layout, .key = &key_, .object_bytes = object_bytes}) {
  }
  S3Result<void> Update(std::span<const std::byte> payload) override {
    if (Status s = verifier_.Feed(payload); !s.ok())
      return Fail("InvalidChunkObject", s.ToString());
    return {};
  }
  S3Result<void> Finish(uint64_t) override {
    if (Status s = verifier_.Finish(); !s.ok()) return Fail("InvalidChunkObject", s.ToString());
    return {};
  }

 private:
  ChunkKey key_;  // before verifier_, which points at it
  ChunkStreamVerifier verifier_;
};

}  // namespace

// The payload's MD5: the ETag, and what a Content-MD5 header must match.
class BodyPipeline::Md5 final : public BodyVerifier {
 public:
  explicit Md5(std::string expected_raw) : expected_(std::move(expected_raw)) {}
  S3Result<void> Update(std::span<const std::byte> payload) override {
    md5_.Update(payload);
    return {};
  }
  S3Result<void> Finish(uint64_t) override {
    digest_ = md5_.Finish();
    if (!expected_.empty() && digest_ != expected_) {
      return Fail("BadDigest", "The Content-MD5 you specified did not match what we received.");
    }
    return {};
  }
  const std::string& digest() const { return digest_; }

 private:
  Digest md5_{Digest::Kind::kMd5};
  std::string expected_;  // raw bytes; empty without Content-MD5
  std::string digest_;
};

S3Result<std::optional<RequestChecksum>> RequestChecksum::Of(const S3Request& r) {
  std::optional<RequestChecksum> found;
  for (const auto& [name, value] : r.headers) {
    if (!name.starts_with("x-amz-checksum-") || name == "x-amz-checksum-algorithm" ||
        name == "x-amz-checksum-type" || name == "x-amz-checksum-mode") {
      continue;  // which checksum, of what, and whether to answer one: no value of their own
    }
    std::optional<PayloadChecksum> algorithm = PayloadChecksum::ForHeader(name);
    if (!algorithm) return Fail("InvalidArgument", "unsupported checksum " + name);
    found.emplace(RequestChecksum{std::move(*algorithm), value});
  }
  return found;
}

S3Result<std::unique_ptr<BodyPipeline>> BodyPipeline::ForRequest(
    const S3Request& r, const std::optional<SigV4Identity>& id,
    std::optional<uint64_t> content_length, const std::optional<ModelPreset>& kv) {
  std::unique_ptr<BodyPipeline> p(new BodyPipeline());
  const std::string payload_hash =
      id ? id->payload_hash
         : (r.Header("x-amz-content-sha256") ? *r.Header("x-amz-content-sha256")
                                             : std::string(kUnsignedPayload));
  const bool streaming = payload_hash.starts_with("STREAMING-");
  uint64_t expected_length = 0;
  if (streaming) {
    const std::string* decoded = r.Header("x-amz-decoded-content-length");
    if (decoded == nullptr) {
      return Fail("MissingContentLength", "x-amz-decoded-content-length is required");
    }
    if (!ParseDecimal(*decoded, &expected_length)) {
      return Fail("InvalidArgument", "x-amz-decoded-content-length must be a decimal number");
    }
    std::optional<PayloadChecksum> trailer;
    if (const std::string* t = r.Header("x-amz-trailer")) {
      std::string name = *t;
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      trailer = PayloadChecksum::ForHeader(name);
      if (!trailer) return Fail("InvalidArgument", "unsupported x-amz-trailer '" + *t + "'");
    }
    std::optional<ChunkSignatureChain> chain;
    const bool signed_trailers = payload_hash == kStreamingPayloadTrailer;
    if (payload_hash == kStreamingPayload || signed_trailers) {
      if (!id) return Fail("AccessDenied", "signed streaming upload without a signature");
      chain.emplace(*id);
    } else if (payload_hash != "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
      return Fail("InvalidArgument", "unsupported x-amz-content-sha256 '" + payload_hash + "'");
    }
    p->chunked_.emplace(std::move(chain), expected_length, std::move(trailer), signed_trailers);
  } else {
    if (!content_length && r.Header("transfer-encoding") == nullptr) {
      return Fail("MissingContentLength", "Content-Length is required");
    }
    expected_length = content_length.value_or(0);
    if (payload_hash != kUnsignedPayload && payload_hash.size() != 64) {
      return Fail("InvalidArgument", "unsupported x-amz-content-sha256 '" + payload_hash + "'");
    }
    if (content_length) p->verifiers_.push_back(std::make_unique<LengthVerifier>(expected_length));
    if (payload_hash != kUnsignedPayload) {
      p->verifiers_.push_back(std::make_unique<Sha256Verifier>(payload_hash));
    }
  }
  // An x-amz-checksum-* header names a checksum of the whole payload: it is checked too.
  S3Result<std::optional<RequestChecksum>> checksum = RequestChecksum::Of(r);
  if (!checksum) return std::unexpected(checksum.error());
  if (*checksum) {
    p->header_checksum_.emplace((*checksum)->algorithm.header(), (*checksum)->value);
    p->verifiers_.push_back(std::make_unique<HeaderChecksumVerifier>(
        std::move((*checksum)->algorithm), std::move((*checksum)->value)));
  }
  std::string content_md5;
  if (const std::string* md5 = r.Header("content-md5")) {
    if (!Base64Decode(*md5, &content_md5) || content_md5.size() != 16) {
      return Fail("InvalidDigest", "The Content-MD5 you specified was invalid.");
    }
  }
  auto md5 = std::make_unique<Md5>(std::move(content_md5));
  p->md5_ = md5.get();
  p->verifiers_.push_back(std::move(md5));
  if (kv) {
    Result<ChunkKey> key = ChunkKey::FromHex(r.key);
    if (!key) {
      return Fail("InvalidChunkObject",
                  "objects in a KV bucket are named by their 32-hex-digit chunk key");
    }
    p->verifiers_.push_back(std::make_unique<ChunkObjectVerifier>(
        kv->layout, *key,
        streaming || content_length ? std::optional(expected_length) : std::nullopt));
  }
  return p;
}

S3Result<std::span<const std::byte>> BodyPipeline::Feed(std::span<const std::byte> raw) {
  std::span<const std::byte> payload = raw;
  if (chunked_) {
    decoded_.clear();
    if (auto d = chunked_->Feed(raw, &decoded_); !d) return std::unexpected(d.error());
    payload = AsBytes(decoded_);
  }
  if (payload.empty()) return payload;
  total_ += payload.size();
  for (const std::unique_ptr<BodyVerifier>& v : verifiers_) {
    if (S3Result<void> s = v->Update(payload); !s) return std::unexpected(s.error());
  }
  return payload;
}

S3Result<std::string> BodyPipeline::Finish() {
  if (chunked_) {
    if (auto d = chunked_->Finish(); !d) return std::unexpected(d.error());
  }
  for (const std::unique_ptr<BodyVerifier>& v : verifiers_) {
    if (S3Result<void> s = v->Finish(total_); !s) return std::unexpected(s.error());
  }
  return ToHex(md5_->digest());
}

std::optional<std::pair<std::string, std::string>> BodyPipeline::checksum() const {
  if (header_checksum_) return header_checksum_;
  return chunked_ ? chunked_->checksum() : std::nullopt;
}

}  // namespace objectcache::server
