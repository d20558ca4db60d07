// HTTP range and conditional-request evaluation for GET and HEAD (RFC 9110 sections 13 and 14,
// as S3 answers them), as pure functions: the server calls them, and the unit test and the
// fuzz target compare them with simple references over the whole u64 domain.
//
// Thread-safe: no state.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "s3/s3_error.h"

namespace objectcache::server {

// The bytes [first, end) of an object. Always first < end <= the object's size.
struct ByteRange {
  uint64_t first = 0;
  uint64_t end = 0;
  uint64_t length() const { return end - first; }
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

// Evaluates a Range header against an object of `size` bytes, with no overflow anywhere in the
// u64 domain (numbers too large for u64 count as u64 max):
//   "bytes=a-b"  [a, min(b, size - 1) + 1)      a > b: not a valid range, ignored
//   "bytes=a-"   [a, size)
//   "bytes=-n"   the last min(n, size) bytes     n = 0: unsatisfiable
// Returns nullopt when the header is to be ignored and the whole object served (not "bytes=",
// malformed, or several ranges), a range to serve with 206, or the error InvalidRange (416) when
// the range is well formed but unsatisfiable (a >= size, or an empty object).
s3::S3Result<std::optional<ByteRange>> EvaluateRange(std::string_view header, uint64_t size);

// The conditional headers of a GET or HEAD; null when absent.
struct Conditions {
  const std::string* if_match = nullptr;
  const std::string* if_none_match = nullptr;
  const std::string* if_modified_since = nullptr;
  const std::string* if_unmodified_since = nullptr;
};

enum class ConditionOutcome { kProceed, kNotModified, kPreconditionFailed };

// RFC 9110 13.2.2's order for an object with `etag` (unquoted) modified at `mtime`:
// If-Match (else If-Unmodified-Since) fails with 412; then If-None-Match (else
// If-Modified-Since) answers 304. An unparseable date is ignored, as the RFC says.
ConditionOutcome EvaluateConditions(const Conditions& conditions, std::string_view etag,
                                    std::time_t mtime);

// Does an If-Match / If-None-Match list ("*", or ETags, quoted or not, weak or not, separated by
// commas) name `etag`?
bool EtagListMatches(std::string_view list, std::string_view etag);

// The conditions S3 defines for deleting an object: an ETag (If-Match), a modification time and
// a size, each of which must hold when present. DeleteObject takes them as the headers
// If-Match, x-amz-if-match-last-modified-time and x-amz-if-match-size; each object of
// DeleteObjects as the elements ETag, LastModifiedTime and Size.
struct DeleteConditions {
  std::optional<std::string> if_match;  // an If-Match list, or *
  std::optional<std::time_t> last_modified;
  std::optional<uint64_t> size;

  bool any() const { return if_match || last_modified || size; }
};

// Reads the three values (null when absent). A time is an HTTP date or ISO 8601
// ("2026-11-30T14:20:05.000Z", fractions of a second ignored), a size a plain decimal number.
// A value that cannot be read is InvalidArgument, never ignored: ignoring it would turn a
// conditional delete into an unconditional one.
s3::S3Result<DeleteConditions> ParseDeleteConditions(const std::string* if_match,
                                                     const std::string* last_modified,
                                                     const std::string* size);

// Whether an object version with `etag` (unquoted), `mtime` and `size` meets every condition.
bool DeleteConditionsHold(const DeleteConditions& conditions, std::string_view etag,
                          std::time_t mtime, uint64_t size);

}  // namespace objectcache::server
