// AWS Signature Version 4 for S3: verifying requests signed in the Authorization header or in
// a presigned URL, verifying the chunk signatures of the streaming upload encoding
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), and signing (for our own clients, tests and
// benchmarks). Follows the AWS SigV4 documentation: canonical request, string to sign, the
// derived signing key.
//
// Pure functions and value types; thread-safe.
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3/s3_error.h"
#include "s3/s3_request.h"

namespace objectcache::s3 {

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kStreamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view kStreamingPayloadTrailer =
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Who signed a request, and what the body must then match.
struct SigV4Identity {
  std::string access_key;
  int signature_version = 4;  // 2: verified by VerifySigV2 (sigv2.h)
  bool presigned = false;
  std::string payload_hash;  // x-amz-content-sha256 as signed (hex, UNSIGNED-PAYLOAD, streaming)
  // For checking streaming chunk signatures.
  std::string signing_key;
  std::string amz_date;
  std::string scope;
  std::string signature;
};

// Secret for an access key, or nullptr when unknown.
using SecretLookup = std::function<const std::string*(std::string_view access_key)>;

// Verifies the request's signature at time `now` for a server in `region`. The signature must
// cover `host` and every header present that the server acts on (MustBeSigned). Errors:
// AccessDenied (no or expired signature, host or such a header not signed), InvalidAccessKeyId,
// SignatureDoesNotMatch, RequestTimeTooSkewed (more than 15 minutes off),
// AuthorizationHeaderMalformed / AuthorizationQueryParametersError (malformed, or a credential
// scope for another region or service).
S3Result<SigV4Identity> VerifySigV4(const S3Request& request, const SecretLookup& secrets,
                                    std::time_t now, std::string_view region);

// Headers a signature must cover when present: host, content-md5, x-amz-* and x-objectcache-*.
bool MustBeSigned(std::string_view lowercase_header_name);

// True when the request carries any signature (header or query, Version 4 or 2).
bool IsSigned(const S3Request& request);

// The access key a signed request names (SigV4 or SigV2, header or presigned query), before
// any check of its signature: only for choosing whose secret to check it with. Empty when the
// request names none.
std::string ClaimedAccessKey(const S3Request& request);

// Checks the chunk signatures of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body in order.
class ChunkSignatureChain {
 public:
  explicit ChunkSignatureChain(const SigV4Identity& id)
      : signing_key_(id.signing_key),
        amz_date_(id.amz_date),
        scope_(id.scope),
        previous_(id.signature) {}
  // `chunk_sha256_hex` is the SHA-256 of the chunk's data; `signature` the one in its header.
  bool Verify(std::string_view chunk_sha256_hex, std::string_view signature);
  // The x-amz-trailer-signature of STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, after the final
  // chunk: `canonical_trailers` is each trailer but the signature, "name:value\n", by name.
  bool VerifyTrailer(std::string_view canonical_trailers, std::string_view signature) const;

 private:
  std::string signing_key_, amz_date_, scope_, previous_;
};

// The signature of a streaming chunk, given the previous one (for clients and tests).
std::string ChunkSignature(std::string_view signing_key, std::string_view amz_date,
                           std::string_view scope, std::string_view previous_signature,
                           std::string_view chunk_sha256_hex);
// The signature of the trailer section, given the final chunk's (for clients and tests).
std::string TrailerSignature(std::string_view signing_key, std::string_view amz_date,
                             std::string_view scope, std::string_view final_chunk_signature,
                             std::string_view canonical_trailers);

struct SigningInput {
  std::string method;
  std::string raw_path;                                      // percent-encoded as it will be sent
  std::vector<std::pair<std::string, std::string>> query;    // decoded
  std::vector<std::pair<std::string, std::string>> headers;  // must include host
  std::string payload_hash;
  std::string access_key, secret_key, region = "us-east-1";
  std::time_t time = 0;
};

// Returns the Authorization header value, and adds x-amz-date and x-amz-content-sha256 to the
// headers it signs.
std::string SignRequest(SigningInput* input);

// "20261130T142005Z" for a time.
std::string AmzDate(std::time_t t);
// The SigV4 signing key for a date (YYYYMMDD), region and service.
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);

}  // namespace objectcache::s3
