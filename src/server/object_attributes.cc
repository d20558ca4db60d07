#include "server/object_attributes.h"

#include <strings.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/utc_time.h"
#include "s3/s3_request.h"

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
  if (checksum) j["c"] = nlohmann::json::array({{checksum->first, checksum->second}});
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Reads the attributes document as it is parsed (SAX), into the fields it names, without
// building a tree of it: a GET decodes one for every response. Accepts what the tree decoder
// did: "e" and "t" as strings, "m", "h" and "c" (the checksum, one pair) as lists of
// [name, value] string pairs (other entries skipped), anything else ignored; the document itself
// must be one JSON object.
class AttributesReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit AttributesReader(ObjectAttributes* out) : out_(out) {}

  bool is_object() const { return is_object_; }
  // The checksum pairs "c" held: one, in a document this server wrote.
  const std::vector<std::pair<std::string, std::string>>& checksums() const { return checksums_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool string(string_t& s) override {
    if (depth_ == 1 && key_ == "e") out_->etag = std::move(s);
    if (depth_ == 1 && key_ == "t") out_->content_type = std::move(s);
    if (depth_ == 3 && list_ != nullptr) {
      if (pair_size_ < 2) pair_[pair_size_] = std::move(s);
      ++pair_size_;
    }
    return true;
  }
  bool start_object(std::size_t) override { return Open(false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  // A scalar: in a pair, one that is not a string spoils it.
  bool Value() {
    if (depth_ == 3) pair_ok_ = false;
    return true;
  }
  bool Open(bool array) {
    if (depth_ == 0) is_object_ = !array;
    if (depth_ == 1 && array && (key_ == "m" || key_ == "h" || key_ == "c")) {
      list_ = key_ == "m"   ? &out_->user_metadata
              : key_ == "h" ? &out_->stored_headers
                            : &checksums_;
    }
    if (depth_ == 2 && list_ != nullptr) {
      pair_size_ = 0;
      pair_ok_ = array;
    }
    if (depth_ == 3) pair_ok_ = false;
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    if (depth_ == 2 && list_ != nullptr && pair_ok_ && pair_size_ == 2) {
      list_->emplace_back(std::move(pair_[0]), std::move(pair_[1]));
    }
    if (depth_ == 1) list_ = nullptr;
    return true;
  }

  ObjectAttributes* out_;
  bool is_object_ = false;
  size_t depth_ = 0;  // containers open
  std::string key_;   // the top-level key whose value is being read
  std::vector<std::pair<std::string, std::string>>* list_ = nullptr;  // the list being read
  std::vector<std::pair<std::string, std::string>> checksums_;
  std::string pair_[2];
  size_t pair_size_ = 0;
  bool pair_ok_ = false;
};

}  // namespace

std::optional<ObjectAttributes> ObjectAttributes::Decode(std::string_view text) {
  ObjectAttributes a;
  if (text.empty()) return a;  // an object stored without S3 metadata
  AttributesReader reader(&a);
  if (!nlohmann::json::sax_parse(text, &reader) || !reader.is_object()) return std::nullopt;
  if (reader.checksums().size() == 1) a.checksum = reader.checksums().front();
  return a;
}

namespace {
// A Content-Encoding without aws-chunked, which names how the request's body was framed, not a
// coding of the object (S3 stores the rest). Empty when nothing else is named.
std::string WithoutAwsChunked(std::string_view encoding) {
  std::string out;
  for (std::string_view coding : s3::HeaderListItems(encoding)) {
    const bool framing = coding.size() == 11 && strncasecmp(coding.data(), "aws-chunked", 11) == 0;
    if (!coding.empty() && !framing) out += (out.empty() ? "" : ",") + std::string(coding);
  }
  return out;
}
}  // namespace

ObjectAttributes ObjectAttributes::FromRequest(const Headers& headers) {
  ObjectAttributes a;
  for (const auto& [k, v] : headers) {
    if (k == "content-type") {
      a.content_type = v;
    } else if (k == "content-encoding") {
      if (std::string coding = WithoutAwsChunked(v); !coding.empty())
        a.stored_headers.emplace_back(k, std::move(coding));
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

void ObjectAttributes::AddChecksumTo(Headers* response) const {
  if (!checksum) return;
  response->emplace_back(checksum->first, checksum->second);
  response->emplace_back("x-amz-checksum-type", "FULL_OBJECT");
}

std::optional<std::string> ObjectAttributes::OverrideFromQuery(
    const std::vector<std::pair<std::string, std::string>>& query) {
  constexpr std::string_view kPrefix = "response-";
  auto header_of = [&](const std::string& name) -> std::optional<std::string_view> {
    if (!name.starts_with(kPrefix)) return std::nullopt;
    const std::string_view header = std::string_view(name).substr(kPrefix.size());
    if (header == "content-type" ||
        std::ranges::find(kStoredHeaders, header) != std::end(kStoredHeaders)) {
      return header;
    }
    return std::nullopt;
  };
  for (const auto& [name, value] : query) {
    const bool control = std::ranges::any_of(value, [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\t') || u == 0x7f;
    });
    if (header_of(name) && control) return name;
  }
  for (const auto& [name, value] : query) {
    const std::optional<std::string_view> header = header_of(name);
    if (!header) continue;
    if (*header == "content-type") {
      content_type = value;
      continue;
    }
    auto it =
        std::ranges::find_if(stored_headers, [&](const auto& h) { return h.first == *header; });
    if (it != stored_headers.end()) {
      it->second = value;
    } else {
      stored_headers.emplace_back(*header, value);
    }
  }
  return std::nullopt;
}

size_t ObjectAttributes::UserMetadataBytes() const {
  size_t n = 0;
  for (const auto& [k, v] : user_metadata) n += k.size() + v.size();
  return n;
}

std::string HttpTime(std::time_t t) {
  // Written out by hand: every response has one or two, and strftime (locale lookups) cost
  // more than the rest of a small GET's header.
  static constexpr char kDays[] = "SunMonTueWedThuFriSat";
  static constexpr char kMonths[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  std::tm tm{};
  if (::gmtime_r(&t, &tm) == nullptr || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900) {
    return HttpTime(0);  // outside four-digit years: no date HTTP can carry
  }
  auto two = [](char* at, int v) {
    at[0] = static_cast<char>('0' + v / 10);
    at[1] = static_cast<char>('0' + v % 10);
  };
  const int year = tm.tm_year + 1900;
  std::string out = "Thu, 01 Jan 1970 00:00:00 GMT";
  out.replace(0, 3, kDays + 3 * tm.tm_wday, 3);
  two(&out[5], tm.tm_mday);
  out.replace(8, 3, kMonths + 3 * tm.tm_mon, 3);
  two(&out[12], year / 100);
  two(&out[14], year % 100);
  two(&out[17], tm.tm_hour);
  two(&out[20], tm.tm_min);
  two(&out[23], tm.tm_sec);
  return out;
}

std::string IsoTime(std::time_t t) { return FormatUtc(t, "%Y-%m-%dT%H:%M:%S.000Z"); }

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
