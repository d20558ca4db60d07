#include "s3/s3_request.h"

#include <strings.h>

#include <optional>

#include "core/hex.h"
#include "core/query_string.h"

namespace objectcache::s3 {
const std::string* S3Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

const std::string* S3Request::Query(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return &v;
  }
  return nullptr;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((b & 0xE0) == 0xC0) {
      n = 1, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3, cp = b & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

bool ParseDecimal(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      *out += in[i];
      continue;
    }
    uint8_t byte = 0;
    if (i + 2 >= in.size() || !DecodeHex(in.substr(i + 1, 2), &byte)) return false;
    *out += static_cast<char>(byte);
    i += 2;
  }
  return true;
}

std::string_view TrimOws(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

std::vector<std::string_view> HeaderListItems(std::string_view value) {
  std::vector<std::string_view> items;
  if (value.empty()) return items;
  for (;;) {
    const size_t comma = value.find(',');
    items.push_back(TrimOws(value.substr(0, comma)));
    if (comma == std::string_view::npos) return items;
    value.remove_prefix(comma + 1);
  }
}

std::string UriEncode(std::string_view in, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size() * 3 / 2);
  for (char c : in) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (c == '/' && keep_slash)) {
      out += c;
    } else {
      auto b = static_cast<unsigned char>(c);
      out += '%';
      out += kDigits[b >> 4];
      out += kDigits[b & 0xf];
    }
  }
  return out;
}

namespace {

// The headers that frame and route a request, each at most once: two Host headers could name
// two buckets (virtual-hosted style) and RFC 9112 answers them 400; a Transfer-Encoding other
// than chunked alone ("gzip, chunked", "identity") is a coding this server does not undo, and
// Beast, which reads a body as chunked whenever chunked comes last, would store the coded bytes
// as the object.
std::optional<S3Error> CheckFraming(const S3Request& r) {
  int hosts = 0, codings = 0;
  for (const auto& [name, value] : r.headers) {
    if (name == "host") ++hosts;
    if (name != "transfer-encoding") continue;
    ++codings;
    if (value.size() != 7 || ::strncasecmp(value.data(), "chunked", 7) != 0) {
      return MakeS3Error("NotImplemented", "Transfer-Encoding '" + value.substr(0, 64) +
                                               "' is not implemented; only chunked is");
    }
  }
  if (hosts > 1) return MakeS3Error("InvalidRequest", "the request has more than one Host header");
  if (codings > 1) {
    return MakeS3Error("InvalidRequest", "the request has more than one Transfer-Encoding header");
  }
  return std::nullopt;
}

}  // namespace

S3Result<S3Request> ParseS3Request(std::string_view method, std::string_view target,
                                   std::vector<std::pair<std::string, std::string>> headers,
                                   const std::vector<std::string>& virtual_host_domains) {
  S3Request r;
  r.method = std::string(method);
  r.headers = std::move(headers);
  if (std::optional<S3Error> framing = CheckFraming(r)) return std::unexpected(*framing);
  if (target.empty() || target[0] != '/') {
    return std::unexpected(MakeS3Error("InvalidRequest", "request target must be a path"));
  }
  size_t q = target.find('?');
  r.raw_path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) {
    Status parsed = ForEachQueryPair(
        target.substr(q + 1), [&](std::string_view name, std::optional<std::string_view> value) {
          std::string n, v;
          if (!PercentDecode(name, &n) || (value && !PercentDecode(*value, &v))) {
            return InvalidArgumentError("malformed query string");
          }
          r.query.emplace_back(std::move(n), std::move(v));
          return Status();
        });
    if (!parsed.ok()) return std::unexpected(MakeS3Error("InvalidArgument", parsed.message()));
  }
  std::string path;
  if (!PercentDecode(r.raw_path, &path)) {
    return std::unexpected(MakeS3Error("InvalidURI", "malformed percent-encoding in the path"));
  }
  // Virtual-hosted style: the bucket is the Host's first label.
  if (const std::string* host = r.Header("host")) {
    std::string_view h = *host;
    if (size_t colon = h.rfind(':'); colon != std::string_view::npos && h.find(']') == h.npos) {
      h = h.substr(0, colon);
    }
    for (const std::string& domain : virtual_host_domains) {
      if (h.size() > domain.size() + 1 && h.ends_with(domain) &&
          h[h.size() - domain.size() - 1] == '.') {
        r.bucket = std::string(h.substr(0, h.size() - domain.size() - 1));
        r.key = path.substr(1);
        r.virtual_host = true;
        return r;
      }
    }
  }
  std::string_view rest = std::string_view(path).substr(1);
  size_t slash = rest.find('/');
  r.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) r.key = std::string(rest.substr(slash + 1));
  return r;
}

}  // namespace objectcache::s3
