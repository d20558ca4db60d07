// Range and conditional-header evaluation (server/conditions.h) against references written the
// obvious way in 128-bit arithmetic. Input: 8 bytes of object size, then the Range header, then
// If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since values, separated by
// newlines (a missing field: header absent). Properties: the same answer as the reference; a
// served range lies inside the object and is not empty. The same fields, read as a delete's
// conditions (If-Match, the last-modified time from If-Unmodified-Since's field, the size from
// the Range field), are parsed and evaluated as the reference does: a size past u64 or a time
// that is not one is refused, never ignored.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/conditions.h"
#include "server/object_attributes.h"

namespace {

__extension__ typedef unsigned __int128 u128;
constexpr uint64_t kMax = UINT64_MAX;

enum class Kind { kIgnore, kUnsatisfiable, kRange };
struct Ref {
  Kind kind = Kind::kIgnore;
  uint64_t first = 0, end = 0;
};

std::string_view Strip(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Digits only; saturates at u64 max.
std::optional<uint64_t> Number(std::string_view s) {
  if (s.empty()) return std::nullopt;
  u128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
    if (v > kMax) v = u128{kMax} + 1;  // stays above the u64 range
  }
  return static_cast<uint64_t>(v > kMax ? u128{kMax} : v);
}

// Digits only, at most 20 of them, within u64 (no saturation): a size, exactly.
std::optional<uint64_t> Decimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  u128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > kMax) return std::nullopt;
  return static_cast<uint64_t>(v);
}

Ref ReferenceRange(std::string_view h, uint64_t size) {
  h = Strip(h);
  std::string unit(h.substr(0, 6));  // named in any case (RFC 9110, 14.1)
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit != "bytes=") return {};
  std::string_view spec = Strip(h.substr(6));
  if (spec.find(',') != std::string_view::npos) return {};
  const size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return {};
  std::string_view a = spec.substr(0, dash), b = spec.substr(dash + 1);
  if (a.empty()) {
    std::optional<uint64_t> n = Number(b);
    if (!n) return {};
    if (*n == 0 || size == 0) return {Kind::kUnsatisfiable};
    const u128 take = *n < size ? *n : size;
    return {Kind::kRange, static_cast<uint64_t>(u128{size} - take), size};
  }
  std::optional<uint64_t> first = Number(a);
  if (!first) return {};
  u128 end = size;
  if (!b.empty()) {
    std::optional<uint64_t> last = Number(b);
    if (!last || *last < *first) return {};
    end = u128{*last} + 1;
  }
  if (*first >= size) return {Kind::kUnsatisfiable};
  if (end > size) end = size;
  return {Kind::kRange, *first, static_cast<uint64_t>(end)};
}

bool ReferenceEtagMatch(std::string_view list, std::string_view etag) {
  size_t start = 0;
  for (;;) {
    size_t comma = list.find(',', start);
    std::string_view item = Strip(list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.substr(0, 2) == "W/") item = item.substr(2);
    if (item.size() >= 2 && item.front() == '"' && item.back() == '"')
      item = item.substr(1, item.size() - 2);
    if (item == "*" || (!item.empty() && item == etag)) return true;
    if (comma == std::string_view::npos) return false;
    start = comma + 1;
  }
}

objectcache::server::ConditionOutcome ReferenceConditions(const std::optional<std::string>* h,
                                                          std::string_view etag,
                                                          std::time_t mtime) {
  using objectcache::server::ConditionOutcome;
  using objectcache::server::ParseHttpTime;
  // h: if-match, if-none-match, if-modified-since, if-unmodified-since
  if (h[0] && !ReferenceEtagMatch(*h[0], etag)) return ConditionOutcome::kPreconditionFailed;
  if (!h[0] && h[3]) {
    auto t = ParseHttpTime(*h[3]);
    if (t && mtime > *t) return ConditionOutcome::kPreconditionFailed;
  }
  if (h[1] && ReferenceEtagMatch(*h[1], etag)) return ConditionOutcome::kNotModified;
  if (!h[1] && h[2]) {
    auto t = ParseHttpTime(*h[2]);
    if (t && mtime <= *t) return ConditionOutcome::kNotModified;
  }
  return ConditionOutcome::kProceed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache::server;
  if (size < 8) return 0;
  uint64_t object_size;
  std::memcpy(&object_size, data, 8);
  // Small sizes are where the edges are; keep full-width ones too.
  if (data[0] & 1) object_size %= 4096;
  std::string_view rest(reinterpret_cast<const char*>(data + 8), size - 8);
  std::vector<std::optional<std::string>> fields;
  for (int i = 0; i < 5; ++i) {
    if (rest.empty()) {
      fields.emplace_back();
      continue;
    }
    const size_t nl = rest.find('\n');
    fields.emplace_back(std::string(rest.substr(0, nl)));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }

  if (fields[0]) {
    const Ref want = ReferenceRange(*fields[0], object_size);
    auto got = EvaluateRange(*fields[0], object_size);
    if (want.kind == Kind::kUnsatisfiable) {
      if (got.has_value() || got.error().code != "InvalidRange") std::abort();
    } else if (!got.has_value()) {
      std::abort();
    } else if (want.kind == Kind::kIgnore) {
      if (got->has_value()) std::abort();
    } else {
      if (!got->has_value() || (*got)->first != want.first || (*got)->end != want.end) {
        std::abort();
      }
      if ((*got)->first >= (*got)->end || (*got)->end > object_size) std::abort();
    }
  }

  const std::string etag = "0123456789abcdef0123456789abcdef";
  const std::time_t mtime = static_cast<std::time_t>(object_size % 4'000'000'000ull);
  const std::optional<std::string> h[4] = {fields[1], fields[2], fields[3], fields[4]};
  Conditions c{.if_match = h[0] ? &*h[0] : nullptr,
               .if_none_match = h[1] ? &*h[1] : nullptr,
               .if_modified_since = h[2] ? &*h[2] : nullptr,
               .if_unmodified_since = h[3] ? &*h[3] : nullptr};
  if (EvaluateConditions(c, etag, mtime) != ReferenceConditions(h, etag, mtime)) std::abort();

  const std::optional<std::string>& size_text = fields[0];
  auto deleting = ParseDeleteConditions(h[0] ? &*h[0] : nullptr, h[3] ? &*h[3] : nullptr,
                                        size_text ? &*size_text : nullptr);
  std::optional<std::time_t> when;
  if (h[3]) when = ParseHttpTime(*h[3]) ? ParseHttpTime(*h[3]) : ParseIsoTime(*h[3]);
  std::optional<uint64_t> bytes;
  if (size_text) bytes = Decimal(*size_text);
  const bool readable =
      (!h[0] || !Strip(*h[0]).empty()) && (!h[3] || when) && (!size_text || bytes);
  if (deleting.has_value() != readable) std::abort();
  if (deleting.has_value()) {
    const bool want = (!h[0] || ReferenceEtagMatch(*h[0], etag)) && (!when || *when == mtime) &&
                      (!bytes || *bytes == object_size);
    if (DeleteConditionsHold(*deleting, etag, mtime, object_size) != want) std::abort();
  }
  return 0;
}
