// An S3 request body on its way into the store (PutObject, UploadPart): decoded where it is
// aws-chunked (its chunk signatures and trailer checked by the decoder) and checked by one
// verifier per concern, each seeing every payload byte in order: the length the request
// declared, its x-amz-content-sha256, an x-amz-checksum-* header, its Content-MD5 (the MD5 is
// also the object's ETag), and in a KV bucket the chunk object's format. Each verifier answers
// the S3 error of its concern; they are asked in that order once the body has ended.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "objectcache/kv_layout.h"
#include "s3/aws_chunked.h"
#include "s3/s3_error.h"
#include "s3/s3_request.h"
#include "s3/sigv4.h"

namespace objectcache::server {

class BodyVerifier {
 public:
  virtual ~BodyVerifier() = default;
  // Every payload byte, in order.
  virtual s3::S3Result<void> Update(std::span<const std::byte> payload) = 0;
  // After the last byte (`total` payload bytes in all): the S3 error when the body does not hold.
  virtual s3::S3Result<void> Finish(uint64_t total) = 0;
};

// The x-amz-checksum-* header of a request that gives a checksum of its whole payload: the
// algorithm, to compute over the payload, and the base64 value it must come to.
struct RequestChecksum {
  s3::PayloadChecksum algorithm;
  std::string value;

  // The one `r` gives (of several, the last), if any; InvalidArgument for a name S3 does not
  // define. x-amz-checksum-algorithm, -type and -mode give no value and are passed over.
  static s3::S3Result<std::optional<RequestChecksum>> Of(const s3::S3Request& r);
};

class BodyPipeline {
 public:
  // What request `r`'s headers ask of its body, read before any byte of it: InvalidArgument,
  // MissingContentLength, InvalidDigest or AccessDenied for headers that ask for what cannot be
  // checked, InvalidChunkObject for a KV bucket's object not named by a chunk key. `id` is the
  // request's signature (unset when anonymous), `content_length` the exchange's, `kv` the
  // bucket's layout when it is a KV bucket (it must outlive the pipeline).
  static s3::S3Result<std::unique_ptr<BodyPipeline>> ForRequest(
      const s3::S3Request& r, const std::optional<s3::SigV4Identity>& id,
      std::optional<uint64_t> content_length, const std::optional<ModelPreset>& kv);

  // The payload in `raw` (bytes as they came off the wire), decoded, once every verifier has
  // seen it; empty while the decoder holds a partial chunk. Valid until the next call.
  s3::S3Result<std::span<const std::byte>> Feed(std::span<const std::byte> raw);
  // After the last byte: the first error of the decoder and then of the verifiers in order,
  // else the payload's MD5 in hex (the ETag).
  s3::S3Result<std::string> Finish();
  // After a Finish that succeeded: the x-amz-checksum-* header or trailer the payload matched
  // (its lowercase name and base64 value), if the request gave one.
  std::optional<std::pair<std::string, std::string>> checksum() const;

 private:
  class Md5;
  BodyPipeline() = default;

  std::optional<s3::AwsChunkedDecoder> chunked_;
  std::string decoded_;
  std::vector<std::unique_ptr<BodyVerifier>> verifiers_;                // in the order they answer
  Md5* md5_ = nullptr;                                                  // one of verifiers_
  std::optional<std::pair<std::string, std::string>> header_checksum_;  // as the header gave it
  uint64_t total_ = 0;
};

}  // namespace objectcache::server
