#include "store/s3/s3_store.h"

#include <charconv>
#include <cstring>
#include <ctime>
#include <map>

#include "core/hex.h"
#include "core/query_string.h"
#include "objectcache/store_registry.h"
#include "s3/connection_pool.h"
#include "s3/crypto.h"
#include "s3/s3_request.h"
#include "s3/xml.h"
#include "store/backend_util.h"

namespace objectcache {
namespace {

constexpr size_t kS3MaxKeyBytes = 1024;
// S3's most keys a listing page; such a page of the longest names, each percent-encoded three
// bytes a byte, is about 3.5 MB of XML: a larger reply is not a listing.
constexpr size_t kMaxKeysPerPage = 1000;
constexpr size_t kMaxListingBytes = size_t{16} << 20;
constexpr char kAttrsHeader[] = "x-amz-meta-objectcache-attrs";
using Query = std::vector<std::pair<std::string, std::string>>;
using Headers = std::vector<std::pair<std::string, std::string>>;

// A decimal number from a response (never trusted): 0 when absent or malformed.
uint64_t ParseU64(const std::string* text) {
  uint64_t v = 0;
  if (text != nullptr) std::from_chars(text->data(), text->data() + text->size(), v);
  return v;
}

Status StatusFor(const s3::S3Response& r, const std::string& what) {
  std::string code;
  if (auto b = r.error_body.find("<Code>"); b != std::string::npos) {
    auto e = r.error_body.find("</Code>", b);
    if (e != std::string::npos) code = r.error_body.substr(b + 6, e - b - 6);
  }
  const std::string message =
      what + ": HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code);
  switch (r.status) {
    case 404:
      return NotFoundError(message);
    case 400:
      return InvalidArgumentError(message);
    case 403:
      return PermissionDeniedError(message);
    case 412:
      return Status(StatusCode::kAborted, message + " (object changed during the read)");
    case 416:
      return OutOfRangeError(message);
    case 507:
      return ResourceExhaustedError(message);
    default:
      return r.status >= 500 ? UnavailableError(message) : InternalError(message);
  }
}

class S3ObjectReader;

class S3Store final : public Store {
 public:
  // Kept for the next calls: more than the server makes at once (--blocking-threads, 8).
  static constexpr size_t kIdleConnections = 16;

  S3Store(s3::S3Endpoint endpoint, std::string bucket, std::string uri)
      : pool_({std::move(endpoint)}, s3::S3Credentials::FromEnvironment(), std::chrono::seconds(60),
              kIdleConnections),
        bucket_(std::move(bucket)),
        uri_(std::move(uri)) {}

  StoreCapabilities Capabilities() const override {
    return {.ranged_reads = true,
            .persistent = true,
            .evicts = false,
            .capacity_bytes = {},
            .max_key_bytes = kS3MaxKeyBytes,
            .tracks_usage = false,
            .pinned_readers = false,
            .utf8_names = true};
  }
  StoreUsage Usage() const override { return {}; }
  std::string Uri() const override { return uri_; }

  // One request on a pooled connection; a broken connection is retried once (every request
  // this store sends is idempotent).
  Result<s3::S3Response> Request(std::string_view method, std::string_view key, const Query& query,
                                 std::string_view body, const Headers& headers,
                                 const std::function<Status(std::span<const std::byte>)>& on_body) {
    const std::string path = "/" + bucket_ + (key.empty() ? "" : "/" + std::string(key));
    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<s3::S3Connection> conn = pool_.Take(0);
      Result<s3::S3Response> r = conn->Send(method, path, query, body, on_body, headers);
      if (r.has_value()) {
        pool_.Return(0, std::move(conn));
        return r;
      }
      if (r.error().code() != StatusCode::kUnavailable || attempt == 1) return r.error();
    }
  }

  Result<s3::S3Response> Head(std::string_view key) {
    OC_RETURN_IF_ERROR(CheckKey(key));
    OC_ASSIGN_OR_RETURN(s3::S3Response r,
                        Request("HEAD", key, {}, "", {}, [](auto) { return Status(); }));
    if (r.status != 200) return StatusFor(r, "stat '" + std::string(key) + "'");
    return r;
  }

  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& options) override {
    OC_RETURN_IF_ERROR(CheckKey(key));
    OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
    if (options.if_absent || options.if_attributes) {
      return UnimplementedError("s3:// store: conditional puts are not supported (storing '" +
                                std::string(key) + "')");
    }
    Headers h;
    if (!options.attributes.empty())
      h.emplace_back(kAttrsHeader, s3::Base64Encode(options.attributes));
    OC_ASSIGN_OR_RETURN(
        s3::S3Response r,
        Request("PUT", key, {},
                std::string_view(reinterpret_cast<const char*>(value.data()), value.size()), h,
                [](auto) { return Status(); }));
    if (r.status != 200) return StatusFor(r, "storing '" + std::string(key) + "'");
    return Status();
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    OC_ASSIGN_OR_RETURN(s3::S3Response r, Head(key));
    const std::string* len = r.Header("content-length");
    return ObjectInfo{std::string(key), ParseU64(len)};
  }

  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override {
    OC_RETURN_IF_ERROR(CheckKey(key));
    size_t got = 0;
    bool too_small = false;
    OC_ASSIGN_OR_RETURN(s3::S3Response r,
                        Request("GET", key, {}, "", {}, [&](std::span<const std::byte> b) {
                          if (got + b.size() > dest.size()) {
                            too_small = true;
                            return ResourceExhaustedError("buffer too small");
                          }
                          std::memcpy(dest.data() + got, b.data(), b.size());
                          got += b.size();
                          return Status();
                        }));
    if (r.status != 200) return StatusFor(r, "reading '" + std::string(key) + "'");
    if (too_small) {
      return ResourceExhaustedError("reading '" + std::string(key) + "': buffer of " +
                                    std::to_string(dest.size()) + " bytes is too small");
    }
    return got;
  }

  // A ranged GET of [offset, offset + dest.size()), pinned to `etag`.
  Status ReadRange(std::string_view key, const std::string& etag, uint64_t offset,
                   std::span<std::byte> dest) {
    if (dest.empty()) return Status();
    size_t got = 0;
    Headers h = {{"Range", "bytes=" + std::to_string(offset) + "-" +
                               std::to_string(offset + dest.size() - 1)},
                 {"If-Match", etag}};
    OC_ASSIGN_OR_RETURN(s3::S3Response r,
                        Request("GET", key, {}, "", h, [&](std::span<const std::byte> b) {
                          if (got + b.size() > dest.size())
                            return DataLossError("range response longer than asked");
                          std::memcpy(dest.data() + got, b.data(), b.size());
                          got += b.size();
                          return Status();
                        }));
    if (r.status != 206 && r.status != 200)
      return StatusFor(r, "reading '" + std::string(key) + "'");
    if (got != dest.size()) return DataLossError("reading '" + std::string(key) + "': short range");
    return Status();
  }

  Status RetrieveRanges(std::span<RangeRead> reads) override {
    std::map<std::string_view, Result<s3::S3Response>> heads;
    for (RangeRead& r : reads) {
      auto it = heads.find(r.key);
      if (it == heads.end()) it = heads.emplace(r.key, Head(r.key)).first;
      if (!it->second) {
        r.status = it->second.error();
        continue;
      }
      const std::string* len = it->second->Header("content-length");
      const std::string* etag = it->second->Header("etag");
      r.status = CheckRange(r, ParseU64(len));
      if (r.status.ok()) r.status = ReadRange(r.key, etag ? *etag : "*", r.offset, r.dest);
    }
    return Status();
  }

  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override {
    std::vector<bool> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      Result<s3::S3Response> r = Head(keys[i]);
      if (r) {
        out[i] = true;
      } else if (r.error().code() != StatusCode::kNotFound &&
                 r.error().code() != StatusCode::kInvalidArgument) {
        return r.error();
      }
    }
    return out;
  }

  Status Delete(std::string_view key) override {
    OC_RETURN_IF_ERROR(Head(key).status());  // S3 deletes are silent; the store says NotFound
    OC_ASSIGN_OR_RETURN(s3::S3Response r,
                        Request("DELETE", key, {}, "", {}, [](auto) { return Status(); }));
    if (r.status != 204 && r.status != 200)
      return StatusFor(r, "deleting '" + std::string(key) + "'");
    return Status();
  }

  Result<ListPage> List(const ListOptions& options) override {
    const size_t max_keys = std::min<size_t>(options.max_keys, kMaxKeysPerPage);
    Query q = {
        {"list-type", "2"}, {"encoding-type", "url"}, {"max-keys", std::to_string(max_keys)}};
    if (!options.prefix.empty()) q.emplace_back("prefix", options.prefix);
    if (!options.start_after.empty()) q.emplace_back("start-after", options.start_after);
    const std::string what = "listing " + uri_;
    std::string xml;
    OC_ASSIGN_OR_RETURN(s3::S3Response r,
                        Request("GET", "", q, "", {}, [&](std::span<const std::byte> b) {
                          if (b.size() > kMaxListingBytes - xml.size())
                            return DataLossError(what + ": a page of over " +
                                                 std::to_string(kMaxListingBytes) + " bytes");
                          xml.append(reinterpret_cast<const char*>(b.data()), b.size());
                          return Status();
                        }));
    if (r.status != 200) return StatusFor(r, what);
    s3::XmlElement root;
    std::string why;
    if (!s3::ParseXml(xml, &root, &why)) return DataLossError(what + ": " + why);
    ListPage page;
    for (const s3::XmlElement& e : root.children) {
      if (e.name != "Contents") continue;
      const s3::XmlElement* k = e.Child("Key");
      const s3::XmlElement* size = e.Child("Size");
      std::string key;
      if (k == nullptr || !s3::PercentDecode(k->text, &key))
        return DataLossError(what + ": bad <Key>");
      // What the caller pages on next must be past what it asked from, or it would page forever.
      const std::string_view after =
          page.objects.empty() ? std::string_view(options.start_after) : page.objects.back().key;
      if (page.objects.size() == max_keys)
        return DataLossError(what + ": more keys than the " + std::to_string(max_keys) + " asked");
      if (!key.starts_with(options.prefix))
        return DataLossError(what + ": '" + EscapeControlBytes(key) + "' is outside the prefix");
      if (key <= after) {
        return DataLossError(what + ": '" + EscapeControlBytes(key) + "' does not come after '" +
                             EscapeControlBytes(after) + "'");
      }
      page.objects.push_back({std::move(key), size ? ParseU64(&size->text) : 0});
    }
    const s3::XmlElement* truncated = root.Child("IsTruncated");
    page.truncated = truncated && truncated->text == "true" && max_keys > 0;
    if (page.truncated && page.objects.empty())
      return DataLossError(what + ": a page cut short with no key in it");
    return page;
  }

  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& options) override;
  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) override;

 private:
  static Status CheckKey(std::string_view key) {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    if (key.size() > kS3MaxKeyBytes) {
      return InvalidArgumentError("object name of " + std::to_string(key.size()) +
                                  " bytes exceeds S3's limit of 1024");
    }
    if (!s3::IsValidUtf8(key)) return InvalidArgumentError("S3 object names must be UTF-8");
    return Status();
  }

  s3::ConnectionPool pool_;
  const std::string bucket_;
  const std::string uri_;
};

class S3ObjectReader final : public ObjectReader {
 public:
  S3ObjectReader(S3Store* store, std::string key, uint64_t size, std::string etag,
                 std::string attributes, int64_t mtime)
      : store_(store),
        key_(std::move(key)),
        size_(size),
        etag_(std::move(etag)),
        attributes_(std::move(attributes)),
        mtime_(mtime) {}
  uint64_t size() const override { return size_; }
  const std::string& attributes() const override { return attributes_; }
  int64_t mtime() const override { return mtime_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dest) const override {
    OC_RETURN_IF_ERROR(CheckRange(RangeRead{.key = key_, .offset = offset, .dest = dest}, size_));
    return store_->ReadRange(key_, etag_, offset, dest);
  }

 private:
  S3Store* store_;
  std::string key_;
  uint64_t size_;
  std::string etag_, attributes_;
  int64_t mtime_;
};

Result<std::unique_ptr<ObjectWriter>> S3Store::NewWriter(std::string_view key,
                                                         const PutOptions& options) {
  OC_RETURN_IF_ERROR(CheckKey(key));
  OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
  return NewBufferedWriter(this, std::string(key), options);
}

Result<std::unique_ptr<ObjectReader>> S3Store::OpenReader(std::string_view key) {
  OC_ASSIGN_OR_RETURN(s3::S3Response r, Head(key));
  const std::string* len = r.Header("content-length");
  const std::string* etag = r.Header("etag");
  std::string attributes;
  if (const std::string* a = r.Header(kAttrsHeader)) {
    if (!s3::Base64Decode(*a, &attributes))
      return DataLossError("damaged attributes of '" + std::string(key) + "'");
  }
  int64_t mtime = 0;
  if (const std::string* lm = r.Header("last-modified")) {
    std::tm tm{};
    if (::strptime(lm->c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) mtime = ::timegm(&tm);
  }
  return std::unique_ptr<ObjectReader>(new S3ObjectReader(this, std::string(key), ParseU64(len),
                                                          etag ? *etag : "*", attributes, mtime));
}

}  // namespace

Result<std::unique_ptr<Store>> OpenS3Store(std::string_view uri) {
  std::string_view rest = uri;
  if (!rest.starts_with("s3://"))
    return InvalidArgumentError("not an s3:// URI: " + std::string(uri));
  rest.remove_prefix(5);
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 >= rest.size()) {
    return InvalidArgumentError(
        "s3:// URI must be s3://HOST:PORT/BUCKET[?tls=true&ca_file=PATH], got '" +
        std::string(uri) + "'");
  }
  OC_ASSIGN_OR_RETURN(s3::S3Endpoint endpoint, s3::S3Endpoint::Parse(rest.substr(0, slash)));
  OC_RETURN_IF_ERROR(ForEachQueryOption(
      query, "s3:// URI",
      [&](std::string_view name, std::optional<std::string_view> value) -> Status {
        if (name == "tls" && (value == "true" || value == "false")) {
          endpoint.tls = value == "true";
        } else if (name == "ca_file" && value && !value->empty() &&
                   s3::PercentDecode(*value, &endpoint.ca_file)) {
          endpoint.tls = true;
        } else {
          return InvalidArgumentError("s3:// URI option '" + std::string(name) +
                                      "' is not tls=true|false or ca_file=PATH");
        }
        return Status();
      }));
  std::string bucket(rest.substr(slash + 1));
  while (!bucket.empty() && bucket.back() == '/') bucket.pop_back();
  auto store = std::make_unique<S3Store>(std::move(endpoint), bucket, std::string(uri));
  // Fail now, not at the first read, if the bucket cannot be reached.
  OC_ASSIGN_OR_RETURN(s3::S3Response r,
                      store->Request("HEAD", "", {}, "", {}, [](auto) { return Status(); }));
  if (r.status != 200) return StatusFor(r, "opening " + std::string(uri));
  return std::unique_ptr<Store>(std::move(store));
}

void RegisterS3Store() { RegisterStoreScheme("s3", OpenS3Store); }

}  // namespace objectcache
