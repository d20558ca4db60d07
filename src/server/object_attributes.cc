#include "server/object_attributes.h"

#include <nlohmann/json.hpp>

namespace objectcache::server {
namespace {
constexpr std::string_view kStoredHeaders[] = {"cache-control", "content-disposition",
                                               "content-encoding", "content-language", "expires"};
}

std::string ObjectAttributes::Encode() const {
  nlohmann::json j;
  j["e"] = etag;
  j["t"] = content_type;
  if (!user_metadata.empty()) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& [k, v] : user_metadata) m.push_back({k, v});
    j["m"] = m;
  }
  if (!stored_headers.empty()) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto& [k, v] : stored_headers) h.push_back({k, v});
    j["h"] = h;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<ObjectAttributes> ObjectAttributes::Decode(std::string_view text) {
  ObjectAttributes a;
  if (text.empty()) return a;  // an object stored without S3 metadata
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  if (auto it = j.find("e"); it != j.end() && it->is_string()) a.etag = *it;
  if (auto it = j.find("t"); it != j.end() && it->is_string()) a.content_type = *it;
  auto pairs = [&j](const char* name, std::vector<std::pair<std::string, std::string>>* out) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_array()) return;
    for (const auto& p : *it) {
      if (p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string()) {
        out->emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
      }
    }
  };
  pairs("m", &a.user_metadata);
  pairs("h", &a.stored_headers);
  return a;
}

ObjectAttributes ObjectAttributes::FromRequest(const Headers& headers) {
  ObjectAttributes a;
  for (const auto& [k, v] : headers) {
    if (k == "content-type") {
      a.content_type = v;
    } else if (k.starts_with("x-amz-meta-")) {
      a.user_metadata.emplace_back(k.substr(11), v);
    } else {
      for (std::string_view h : kStoredHeaders) {
        if (k == h) a.stored_headers.emplace_back(k, v);
      }
    }
  }
  return a;
}

void ObjectAttributes::AddTo(Headers* response) const {
  if (!etag.empty()) response->emplace_back("ETag", "\"" + etag + "\"");
  response->emplace_back("Content-Type", content_type);
  for (const auto& [k, v] : user_metadata) response->emplace_back("x-amz-meta-" + k, v);
  for (const auto& [k, v] : stored_headers) response->emplace_back(k, v);
}

size_t ObjectAttributes::UserMetadataBytes() const {
  size_t n = 0;
  for (const auto& [k, v] : user_metadata) n += k.size() + v.size();
  return n;
}

std::string HttpTime(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

std::string IsoTime(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
  return buf;
}

std::optional<std::time_t> ParseHttpTime(std::string_view text) {
  std::string s(text);
  for (const char* fmt :
       {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %d %H:%M:%S %Y"}) {
    std::tm tm{};
    const char* end = ::strptime(s.c_str(), fmt, &tm);
    if (end != nullptr && *end == '\0') return ::timegm(&tm);
  }
  return std::nullopt;
}

std::optional<std::time_t> ParseIsoTime(std::string_view text) {
  std::string s(text);
  std::tm tm{};
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  if (*end == '.') {
    ++end;
    if (*end < '0' || *end > '9') return std::nullopt;
    while (*end >= '0' && *end <= '9') ++end;
  }
  if (end[0] != 'Z' || end[1] != '\0') return std::nullopt;
  return ::timegm(&tm);
}

}  // namespace objectcache::server
