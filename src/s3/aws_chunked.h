// The aws-chunked content encoding of S3 streaming uploads:
//
//   STREAMING-AWS4-HMAC-SHA256-PAYLOAD:   hex-size;chunk-signature=SIG\r\n DATA \r\n ...
//                                         0;chunk-signature=SIG\r\n\r\n
//   STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: the same, then after the final chunk
//                                         trailer-lines x-amz-trailer-signature:SIG\r\n\r\n
//   STREAMING-UNSIGNED-PAYLOAD-TRAILER:   hex-size\r\n DATA \r\n ... 0\r\n trailer-lines \r\n
//
// (a checksum named by x-amz-trailer, checked). A push decoder: feed it raw body bytes in any
// pieces, it appends the payload to an output string and checks every chunk signature against
// the chain that starts at the request's seed signature, and the trailer signature after it.
// Chunk headers and trailer lines are bounded (4 KiB, 16 trailers) and sizes are checked
// against the declared decoded length, so a hostile body cannot make it allocate or loop.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "s3/crypto.h"
#include "s3/s3_error.h"
#include "s3/sigv4.h"

namespace objectcache::s3 {

class AwsChunkedDecoder {
 public:
  // `chain` is set for signed streaming; empty for the unsigned-trailer form. `trailer`, when
  // set (the request's x-amz-trailer named it), is computed over the payload and must match
  // the trailer line of that name, or the body fails with BadDigest (or IncompleteBody when
  // the line is missing). `signed_trailers` (with a chain: the -PAYLOAD-TRAILER form) asks for
  // an x-amz-trailer-signature over the trailer lines, or SignatureDoesNotMatch.
  AwsChunkedDecoder(std::optional<ChunkSignatureChain> chain, uint64_t decoded_length,
                    std::optional<PayloadChecksum> trailer = std::nullopt,
                    bool signed_trailers = false);

  // Decodes `in`, appending payload bytes to `out`.
  S3Result<void> Feed(std::span<const std::byte> in, std::string* out);
  // After the last byte: was the encoding complete (and the trailer signature right)?
  S3Result<void> Finish();
  bool done() const { return state_ == State::kDone; }
  // The announced trailer checksum (its header and base64 value) once it has been checked.
  std::optional<std::pair<std::string, std::string>> checksum() const;

 private:
  enum class State { kHeader, kData, kDataEnd, kTrailer, kDone };
  S3Result<void> StartChunk();
  S3Result<void> EndChunk();
  S3Result<void> TrailerLine();
  S3Result<void> EndTrailers();

  std::optional<ChunkSignatureChain> chain_;
  uint64_t decoded_length_;
  uint64_t decoded_ = 0;
  State state_ = State::kHeader;
  std::string line_;
  uint64_t chunk_left_ = 0;
  uint64_t chunk_size_ = 0;
  std::string chunk_signature_;
  Digest chunk_sha_{Digest::Kind::kSha256};
  std::optional<PayloadChecksum> trailer_;
  bool trailer_seen_ = false;
  std::string trailer_value_;  // what the announced trailer said, once it matched
  bool signed_trailers_;
  std::map<std::string, std::string> trailers_;  // what the trailer signature covers
  std::optional<std::string> trailer_signature_;
  bool separator_seen_ = false;  // the empty line between the final chunk and signed trailers
};

}  // namespace objectcache::s3
