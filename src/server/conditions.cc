#include "server/conditions.h"

#include <strings.h>

#include <limits>

#include "s3/s3_request.h"
#include "server/object_attributes.h"

namespace objectcache::server {
namespace {

// Decimal digits only; a value past u64 saturates to u64 max (a position that large is past
// the end of any object, which is what it means).
bool ParsePosition(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    v = v > (kMax - d) / 10 ? kMax : v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace

s3::S3Result<std::optional<ByteRange>> EvaluateRange(std::string_view header, uint64_t size) {
  using Range = std::optional<ByteRange>;
  const auto unsatisfiable = [] {
    return std::unexpected(
        s3::MakeS3Error("InvalidRange", "The requested range is not satisfiable"));
  };
  header = s3::TrimOws(header);
  // The unit is named without regard to case (RFC 9110, 14.1): "BYTES=0-1" is a byte range.
  constexpr std::string_view kUnit = "bytes=";
  if (header.size() < kUnit.size() ||
      ::strncasecmp(header.data(), kUnit.data(), kUnit.size()) != 0) {
    return Range();
  }
  const std::string_view spec = s3::TrimOws(header.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) return Range();  // several ranges: the whole
  const size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return Range();
  const std::string_view first_text = spec.substr(0, dash), last_text = spec.substr(dash + 1);
  uint64_t first = 0, last = 0;
  if (first_text.empty()) {  // suffix: the last `last` bytes
    if (!ParsePosition(last_text, &last)) return Range();
    if (last == 0 || size == 0) return unsatisfiable();
    return Range(ByteRange{size - std::min(last, size), size});
  }
  if (!ParsePosition(first_text, &first)) return Range();
  if (!last_text.empty()) {
    if (!ParsePosition(last_text, &last)) return Range();
    if (last < first) return Range();
  }
  if (first >= size) return unsatisfiable();
  // Here size >= 1 and first <= size - 1, so nothing below can wrap.
  const uint64_t end = last_text.empty() || last >= size - 1 ? size : last + 1;
  return Range(ByteRange{first, end});
}

bool EtagListMatches(std::string_view list, std::string_view etag) {
  for (std::string_view item : s3::HeaderListItems(list)) {
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item.size() >= 2 && item.front() == '"' && item.back() == '"') {
      item = item.substr(1, item.size() - 2);
    }
    if (item == "*" || (!item.empty() && item == etag)) return true;
  }
  return false;
}

ConditionOutcome EvaluateConditions(const Conditions& c, std::string_view etag, std::time_t mtime) {
  if (c.if_match != nullptr) {
    if (!EtagListMatches(*c.if_match, etag)) return ConditionOutcome::kPreconditionFailed;
  } else if (c.if_unmodified_since != nullptr) {
    const std::optional<std::time_t> t = ParseHttpTime(*c.if_unmodified_since);
    if (t && mtime > *t) return ConditionOutcome::kPreconditionFailed;
  }
  if (c.if_none_match != nullptr) {
    if (EtagListMatches(*c.if_none_match, etag)) return ConditionOutcome::kNotModified;
  } else if (c.if_modified_since != nullptr) {
    const std::optional<std::time_t> t = ParseHttpTime(*c.if_modified_since);
    if (t && mtime <= *t) return ConditionOutcome::kNotModified;
  }
  return ConditionOutcome::kProceed;
}

s3::S3Result<DeleteConditions> ParseDeleteConditions(const std::string* if_match,
                                                     const std::string* last_modified,
                                                     const std::string* size) {
  DeleteConditions c;
  if (if_match != nullptr) {
    if (s3::TrimOws(*if_match).empty()) {
      return std::unexpected(s3::MakeS3Error("InvalidArgument", "If-Match is empty"));
    }
    c.if_match = *if_match;
  }
  if (last_modified != nullptr) {
    c.last_modified = ParseHttpTime(*last_modified);
    if (!c.last_modified) c.last_modified = ParseIsoTime(*last_modified);
    if (!c.last_modified) {
      return std::unexpected(s3::MakeS3Error(
          "InvalidArgument", "the last-modified condition '" + *last_modified + "' is not a date"));
    }
  }
  if (size != nullptr) {
    uint64_t n = 0;
    if (!s3::ParseDecimal(*size, &n)) {
      return std::unexpected(s3::MakeS3Error(
          "InvalidArgument", "the size condition '" + *size + "' is not a decimal number"));
    }
    c.size = n;
  }
  return c;
}

bool DeleteConditionsHold(const DeleteConditions& c, std::string_view etag, std::time_t mtime,
                          uint64_t size) {
  if (c.if_match && !EtagListMatches(*c.if_match, etag)) return false;
  if (c.last_modified && *c.last_modified != mtime) return false;
  if (c.size && *c.size != size) return false;
  return true;
}

}  // namespace objectcache::server
