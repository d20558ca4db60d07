// S3 object operations and multipart uploads (the bucket operations are in s3_handler.cc).
#include <charconv>
#include <nlohmann/json.hpp>
#include <tuple>

#include "objectcache/chunk_object.h"
#include "s3/crypto.h"
#include "s3/xml.h"
#include "server/s3_handler.h"

namespace objectcache::server {
namespace {

constexpr std::string_view kUploadPrefix = ".mpu/";
constexpr uint64_t kMinPartBytes = 5 << 20;
constexpr int kMaxParts = 10000;

std::string UploadKey(const std::string& id) { return std::string(kUploadPrefix) + id; }

std::string PartKey(const std::string& id, int part) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%05d", part);
  return UploadKey(id) + "/" + buf;
}

std::string Unquote(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

// Does an If-Match / If-None-Match list ("*", or quoted ETags separated by commas) match?
bool EtagListMatches(std::string_view list, const std::string& etag) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == "*" || Unquote(item) == etag) return true;
  }
  return false;
}

// "a-b", "a-", "-n" of "bytes=..." against `size`; see GetObject.
S3Result<std::optional<std::pair<uint64_t, uint64_t>>> ParseRange(std::string_view h,
                                                                  uint64_t size) {
  using Range = std::optional<std::pair<uint64_t, uint64_t>>;
  if (!h.starts_with("bytes=")) return Range();
  std::string_view spec = h.substr(6);
  if (spec.find(',') != std::string_view::npos) return Range();  // multiple ranges: whole object
  size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return Range();
  auto num = [](std::string_view s, uint64_t* v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  uint64_t a = 0, b = 0;
  std::string_view first = spec.substr(0, dash), last = spec.substr(dash + 1);
  if (first.empty()) {
    if (!num(last, &b)) return Range();
    if (b == 0 || size == 0) return Fail("InvalidRange", "The requested range is not satisfiable");
    return Range(std::pair{size - std::min(b, size), size});
  }
  if (!num(first, &a)) return Range();
  if (last.empty()) {
    b = size;
  } else {
    if (!num(last, &b) || b < a) return Range();
    b = std::min(b + 1, size);
  }
  if (a >= size) return Fail("InvalidRange", "The requested range is not satisfiable");
  return Range(std::pair{a, b});
}

}  // namespace

asio::awaitable<S3Result<void>> S3Handler::PutObject(Ctx& c) {
  c.op = S3Op::kPutObject;
  auto b = co_await FindBucket(c.req.bucket);
  if (!b) co_return std::unexpected(b.error());
  auto etag = co_await ReceiveBody(c, ObjectKey(c.req.bucket, c.req.key),
                                   ObjectAttributes::FromRequest(c.req.headers), b->layout);
  if (!etag) co_return std::unexpected(etag.error());
  {
    Headers h{{"ETag", "\"" + *etag + "\""}, {"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(200, std::move(h), "");
  }
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::GetObject(Ctx& c, bool head) {
  c.op = head ? S3Op::kHeadObject : S3Op::kGetObject;
  const S3Request& r = c.req;
  auto b = co_await FindBucket(r.bucket);
  if (!b) co_return std::unexpected(b.error());
  // Open the object and, when it is small, read it: on this thread when that cannot block (an
  // open file, bytes in the page cache), else in one trip to the pool.
  const size_t piece = options_.io_buffer_bytes;
  const std::string store_key = ObjectKey(r.bucket, r.key);
  const bool want_small = !head && !r.Header("range");
  std::string small_body;
  auto read_small = [&](const ObjectReader& rd, bool blocking) -> Status {
    if (!want_small || rd.size() > piece) return Status();
    small_body.resize(rd.size());
    auto dest = AsWritableBytes(small_body);
    return blocking ? rd.ReadAt(0, dest) : rd.ReadAtIfCached(0, dest);
  };
  Result<std::unique_ptr<ObjectReader>> reader = store_->OpenReaderIfCached(store_key);
  if (reader && !read_small(**reader, false).ok()) small_body.clear();
  const bool fast = reader.has_value() && (small_body.size() == (*reader)->size() || !want_small ||
                                           (*reader)->size() > piece);
  if (!fast && (reader || reader.error().code() == StatusCode::kUnavailable)) {
    reader = co_await Blocking([&]() -> Result<std::unique_ptr<ObjectReader>> {
      OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectReader> rd, store_->OpenReader(store_key));
      OC_RETURN_IF_ERROR(read_small(*rd, true));
      return rd;
    });
  }
  if (!reader) {
    if (reader.error().code() == StatusCode::kNotFound) {
      metrics_->store_misses++;
      co_return Fail("NoSuchKey", "The specified key does not exist.");
    }
    co_return std::unexpected(FromStatus(reader.error()));
  }
  metrics_->store_hits++;
  const ObjectReader& obj = **reader;
  std::optional<ObjectAttributes> attrs = ObjectAttributes::Decode(obj.attributes());
  if (!attrs) co_return Fail("InternalError", "object metadata is damaged");
  const uint64_t size = obj.size();
  const std::time_t mtime = obj.mtime();

  // Conditions (RFC 7232 order).
  const std::string* if_match = r.Header("if-match");
  const std::string* if_none_match = r.Header("if-none-match");
  if (if_match && !EtagListMatches(*if_match, attrs->etag)) {
    co_return Fail("PreconditionFailed",
                   "At least one of the pre-conditions you specified did not hold");
  }
  if (!if_match) {
    if (const std::string* ius = r.Header("if-unmodified-since")) {
      std::optional<std::time_t> t = ParseHttpTime(*ius);
      if (t && mtime > *t) {
        co_return Fail("PreconditionFailed",
                       "At least one of the pre-conditions you specified did not hold");
      }
    }
  }
  Headers h{{"Last-Modified", HttpTime(mtime)},
            {"Accept-Ranges", "bytes"},
            {"x-amz-request-id", c.request_id}};
  attrs->AddTo(&h);
  bool not_modified = false;
  if (if_none_match) {
    not_modified = EtagListMatches(*if_none_match, attrs->etag);
  } else if (const std::string* ims = r.Header("if-modified-since")) {
    std::optional<std::time_t> t = ParseHttpTime(*ims);
    not_modified = t && mtime <= *t;
  }
  if (not_modified) {
    (void)co_await c.ex.RespondHeaderOnly(304, std::move(h), 0);
    co_return S3Result<void>();
  }
  uint64_t first = 0, last = size;
  unsigned status = 200;
  if (const std::string* range = r.Header("range")) {
    auto parsed = ParseRange(*range, size);
    if (!parsed) {
      S3Error e = parsed.error();
      h.clear();
      co_return std::unexpected(e);
    }
    if (*parsed) {
      std::tie(first, last) = **parsed;
      status = 206;
      h.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" +
                                          std::to_string(last - 1) + "/" + std::to_string(size));
    }
  }
  if (head) {
    (void)co_await c.ex.RespondHeaderOnly(status, std::move(h), last - first);
    co_return S3Result<void>();
  }
  if (small_body.size() == size && first == 0 && last == size) {
    (void)co_await c.ex.Respond(status, std::move(h), std::move(small_body));
    co_return S3Result<void>();
  }
  if (last - first <= piece) {
    std::string body(last - first, '\0');
    Status s = obj.ReadAtIfCached(first, AsWritableBytes(body));
    if (!s.ok()) s = co_await Blocking([&] { return obj.ReadAt(first, AsWritableBytes(body)); });
    if (!s.ok()) co_return std::unexpected(FromStatus(s));
    (void)co_await c.ex.Respond(status, std::move(h), std::move(body));
    co_return S3Result<void>();
  }
  // Large: stream it through one buffer, a piece at a time.
  IoBuffer buf(piece);
  bool header_sent = false;
  for (uint64_t at = first; at < last;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, last - at));
    auto dest = buf.span().first(n);
    Status s = obj.ReadAtIfCached(at, dest);
    if (!s.ok()) s = co_await Blocking([&] { return obj.ReadAt(at, dest); });
    if (!s.ok()) {
      if (!header_sent) co_return std::unexpected(FromStatus(s));
      // The header is out: the only honest signal left is to cut the response short.
      c.ex.CloseAfterResponse();
      co_return S3Result<void>();
    }
    if (!header_sent) {
      header_sent = true;
      if (!(co_await c.ex.BeginResponse(status, std::move(h), last - first)).ok()) {
        co_return S3Result<void>();  // the client went away
      }
    }
    if (!(co_await c.ex.WriteBody(std::span<const std::byte>(buf.span().first(n)))).ok()) {
      co_return S3Result<void>();
    }
    at += n;
  }
  (void)co_await c.ex.EndResponse();
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::DeleteObject(Ctx& c) {
  c.op = S3Op::kDeleteObject;
  auto b = co_await FindBucket(c.req.bucket);
  if (!b) co_return std::unexpected(b.error());
  Status s = co_await Blocking([&] { return store_->Delete(ObjectKey(c.req.bucket, c.req.key)); });
  if (!s.ok() && s.code() != StatusCode::kNotFound) co_return std::unexpected(FromStatus(s));
  {
    Headers h{{"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(204, std::move(h), "");
  }
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::CopyObject(Ctx& c) {
  c.op = S3Op::kCopyObject;
  const S3Request& r = c.req;
  auto b = co_await FindBucket(r.bucket);
  if (!b) co_return std::unexpected(b.error());
  std::string source;
  std::string_view raw_source = *r.Header("x-amz-copy-source");
  if (size_t q = raw_source.find('?'); q != std::string_view::npos)
    raw_source = raw_source.substr(0, q);
  if (!PercentDecode(raw_source, &source))
    co_return Fail("InvalidArgument", "bad x-amz-copy-source");
  if (source.starts_with("/")) source.erase(0, 1);
  const size_t slash = source.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == source.size()) {
    co_return Fail("InvalidArgument", "x-amz-copy-source must be bucket/key");
  }
  const std::string src_bucket = source.substr(0, slash), src_key = source.substr(slash + 1);
  auto sb = co_await FindBucket(src_bucket);
  if (!sb) co_return std::unexpected(sb.error());
  const std::string* directive = r.Header("x-amz-metadata-directive");
  const bool replace = directive && *directive == "REPLACE";
  if (src_bucket == r.bucket && src_key == r.key && !replace) {
    co_return Fail("InvalidRequest",
                   "This copy request is illegal because it is trying to copy an object to itself "
                   "without changing the object's metadata.");
  }
  auto reader =
      co_await Blocking([&] { return store_->OpenReader(ObjectKey(src_bucket, src_key)); });
  if (!reader) {
    if (reader.error().code() == StatusCode::kNotFound) {
      co_return Fail("NoSuchKey", "The specified key does not exist.");
    }
    co_return std::unexpected(FromStatus(reader.error()));
  }
  std::optional<ObjectAttributes> attrs = replace
                                              ? ObjectAttributes::FromRequest(r.headers)
                                              : ObjectAttributes::Decode((*reader)->attributes());
  if (!attrs) co_return Fail("InternalError", "source object metadata is damaged");
  const std::optional<ModelPreset>& kv = b->layout;
  std::optional<ChunkKey> chunk_key;
  if (kv) {
    Result<ChunkKey> k = ChunkKey::FromHex(r.key);
    if (!k)
      co_return Fail("InvalidChunkObject", "objects in a KV bucket are named by their chunk key");
    chunk_key = *k;
  }
  const size_t piece = options_.io_buffer_bytes;
  auto copied = co_await Blocking([&]() -> Result<std::string> {
    const ObjectReader& src = **reader;
    std::optional<ChunkStreamVerifier> verifier;
    if (kv) {
      verifier.emplace(
          ChunkExpectation{.layout = &kv->layout, .key = &*chunk_key, .object_bytes = src.size()});
    }
    OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectWriter> w,
                        store_->NewWriter(ObjectKey(r.bucket, r.key)));
    Digest md5(Digest::Kind::kMd5);
    IoBuffer buf(piece);
    for (uint64_t at = 0; at < src.size();) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, src.size() - at));
      auto part = buf.span().first(n);
      OC_RETURN_IF_ERROR(src.ReadAt(at, part));
      if (verifier) OC_RETURN_IF_ERROR(verifier->Feed(part));
      md5.Update(std::span<const std::byte>(part));
      OC_RETURN_IF_ERROR(w->Append(part));
      at += n;
    }
    if (verifier) OC_RETURN_IF_ERROR(verifier->Finish());
    ObjectAttributes out = *attrs;
    out.etag = ToHex(md5.Finish());
    OC_RETURN_IF_ERROR(w->SetAttributes(out.Encode()));
    OC_RETURN_IF_ERROR(w->Commit());
    return out.etag;
  });
  if (!copied) {
    if (kv && (copied.error().code() == StatusCode::kDataLoss ||
               copied.error().code() == StatusCode::kInvalidArgument)) {
      co_return Fail("InvalidChunkObject", copied.error().ToString());
    }
    co_return std::unexpected(FromStatus(copied.error()));
  }
  XmlWriter w;
  w.Open("CopyObjectResult", true);
  w.Element("LastModified", IsoTime(std::time(nullptr)));
  w.Element("ETag", "\"" + *copied + "\"");
  w.Close("CopyObjectResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

// ---- multipart -----------------------------------------------------------------------------

namespace {

struct UploadInfo {
  std::string bucket, key;
  ObjectAttributes attrs;
  int64_t created = 0;
};

Result<UploadInfo> LoadUpload(Store& store, const std::string& id) {
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return NotFoundError("no such upload");
  }
  OC_ASSIGN_OR_RETURN(std::string text, ReadWholeObject(store, UploadKey(id)));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j["bucket"].is_string() || !j["key"].is_string() ||
      !j["created"].is_number_integer() || !j["attrs"].is_string()) {
    return DataLossError("upload record is damaged");
  }
  UploadInfo u;
  u.bucket = j["bucket"].get<std::string>();
  u.key = j["key"].get<std::string>();
  u.created = j["created"].get<int64_t>();
  std::optional<ObjectAttributes> a = ObjectAttributes::Decode(j["attrs"].get<std::string>());
  if (!a) return DataLossError("upload record is damaged");
  u.attrs = *a;
  return u;
}

Status DeleteUpload(Store& store, const std::string& id) {
  OC_RETURN_IF_ERROR(ForEachObject(store, UploadKey(id) + "/",
                                   [&](const ObjectInfo& p) { (void)store.Delete(p.key); }));
  Status s = store.Delete(UploadKey(id));
  return s.code() == StatusCode::kNotFound ? Status() : s;
}

}  // namespace

asio::awaitable<S3Result<void>> S3Handler::CreateMultipart(Ctx& c) {
  c.op = S3Op::kCreateMultipart;
  auto b = co_await FindBucket(c.req.bucket);
  if (!b) co_return std::unexpected(b.error());
  const std::string id = RandomHex(16);
  nlohmann::json j;
  j["bucket"] = c.req.bucket;
  j["key"] = c.req.key;
  j["attrs"] = ObjectAttributes::FromRequest(c.req.headers).Encode();
  j["created"] = static_cast<int64_t>(std::time(nullptr));
  const std::string text = j.dump();
  Status s = co_await Blocking([&] { return store_->Put(UploadKey(id), AsBytes(text)); });
  if (!s.ok()) co_return std::unexpected(FromStatus(s));
  XmlWriter w;
  w.Open("InitiateMultipartUploadResult", true);
  w.Element("Bucket", c.req.bucket);
  w.Element("Key", c.req.key);
  w.Element("UploadId", id);
  w.Close("InitiateMultipartUploadResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::UploadPart(Ctx& c) {
  c.op = S3Op::kUploadPart;
  const std::string id = *c.req.Query("uploadId");
  const std::string* pn = c.req.Query("partNumber");
  int part = 0;
  if (pn == nullptr ||
      std::from_chars(pn->data(), pn->data() + pn->size(), part).ec != std::errc() || part < 1 ||
      part > kMaxParts) {
    co_return Fail("InvalidArgument", "partNumber must be an integer from 1 to 10000");
  }
  if (c.req.Header("x-amz-copy-source"))
    co_return Fail("NotImplemented", "UploadPartCopy is not implemented");
  auto upload = co_await Blocking([&] { return LoadUpload(*store_, id); });
  if (!upload || upload->bucket != c.req.bucket || upload->key != c.req.key) {
    co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
  }
  auto etag = co_await ReceiveBody(c, PartKey(id, part), ObjectAttributes(), std::nullopt);
  if (!etag) co_return std::unexpected(etag.error());
  {
    Headers h{{"ETag", "\"" + *etag + "\""}, {"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(200, std::move(h), "");
  }
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::ListParts(Ctx& c) {
  c.op = S3Op::kListParts;
  const std::string id = *c.req.Query("uploadId");
  struct Part {
    int number;
    uint64_t size;
    std::string etag;
    int64_t mtime;
  };
  auto parts = co_await Blocking([&]() -> Result<std::vector<Part>> {
    OC_ASSIGN_OR_RETURN(UploadInfo u, LoadUpload(*store_, id));
    if (u.bucket != c.req.bucket || u.key != c.req.key) return NotFoundError("no such upload");
    std::vector<Part> out;
    OC_RETURN_IF_ERROR(ForEachObject(*store_, UploadKey(id) + "/", [&](const ObjectInfo& p) {
      auto rd = store_->OpenReader(p.key);
      if (!rd) return;
      auto a = ObjectAttributes::Decode((*rd)->attributes());
      out.push_back({std::atoi(p.key.substr(p.key.size() - 5).c_str()), (*rd)->size(),
                     a ? a->etag : "", (*rd)->mtime()});
    }));
    return out;
  });
  if (!parts) {
    if (parts.error().code() == StatusCode::kNotFound) {
      co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
    }
    co_return std::unexpected(FromStatus(parts.error()));
  }
  XmlWriter w;
  w.Open("ListPartsResult", true);
  w.Element("Bucket", c.req.bucket);
  w.Element("Key", c.req.key);
  w.Element("UploadId", id);
  w.Element("StorageClass", "STANDARD");
  w.Element("MaxParts", "10000");
  w.Element("IsTruncated", "false");
  for (const Part& p : *parts) {
    w.Open("Part");
    w.Element("PartNumber", std::to_string(p.number));
    w.Element("LastModified", IsoTime(p.mtime));
    w.Element("ETag", "\"" + p.etag + "\"");
    w.Element("Size", std::to_string(p.size));
    w.Close("Part");
  }
  w.Close("ListPartsResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::CompleteMultipart(Ctx& c) {
  c.op = S3Op::kCompleteMultipart;
  const std::string id = *c.req.Query("uploadId");
  auto b = co_await FindBucket(c.req.bucket);
  if (!b) co_return std::unexpected(b.error());
  auto body = co_await ReadSmallBody(c, 4 << 20);
  if (!body) co_return std::unexpected(body.error());
  XmlElement root;
  std::string why;
  if (!ParseXml(*body, &root, &why) || root.name != "CompleteMultipartUpload") {
    co_return Fail("MalformedXML", "CompleteMultipartUpload body: " + why);
  }
  std::vector<std::pair<int, std::string>> wanted;
  for (const XmlElement& p : root.children) {
    if (p.name != "Part") continue;
    const XmlElement* n = p.Child("PartNumber");
    const XmlElement* e = p.Child("ETag");
    int number = 0;
    if (n == nullptr || e == nullptr ||
        std::from_chars(n->text.data(), n->text.data() + n->text.size(), number).ec !=
            std::errc()) {
      co_return Fail("MalformedXML", "each <Part> needs <PartNumber> and <ETag>");
    }
    if (!wanted.empty() && number <= wanted.back().first) {
      co_return Fail("InvalidPartOrder", "The list of parts was not in ascending order.");
    }
    wanted.emplace_back(number, Unquote(e->text));
  }
  if (wanted.empty()) co_return Fail("MalformedXML", "no parts given");
  const std::optional<ModelPreset>& kv = b->layout;
  std::optional<ChunkKey> chunk_key;
  if (kv) {
    Result<ChunkKey> k = ChunkKey::FromHex(c.req.key);
    if (!k)
      co_return Fail("InvalidChunkObject", "objects in a KV bucket are named by their chunk key");
    chunk_key = *k;
  }
  const size_t piece = options_.io_buffer_bytes;
  auto done = co_await Blocking([&]() -> S3Result<std::string> {
    Result<UploadInfo> u = LoadUpload(*store_, id);
    if (!u || u->bucket != c.req.bucket || u->key != c.req.key) {
      return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
    }
    // Check every part before writing anything.
    std::vector<std::unique_ptr<ObjectReader>> readers;
    std::string md5s;
    uint64_t total = 0;
    for (size_t i = 0; i < wanted.size(); ++i) {
      auto rd = store_->OpenReader(PartKey(id, wanted[i].first));
      std::optional<ObjectAttributes> a;
      if (rd) a = ObjectAttributes::Decode((*rd)->attributes());
      if (!rd || !a || a->etag != wanted[i].second) {
        return Fail("InvalidPart", "part " + std::to_string(wanted[i].first) +
                                       " was not uploaded or its ETag does not match");
      }
      if (i + 1 < wanted.size() && (*rd)->size() < kMinPartBytes) {
        return Fail("EntityTooSmall", "part " + std::to_string(wanted[i].first) +
                                          " is smaller than the 5 MiB minimum");
      }
      std::string raw;
      if (!DecodeHexDigest(a->etag, &raw)) return Fail("InvalidPart", "bad part ETag");
      md5s += raw;
      total += (*rd)->size();
      readers.push_back(std::move(*rd));
    }
    std::optional<ChunkStreamVerifier> verifier;
    if (kv) {
      verifier.emplace(
          ChunkExpectation{.layout = &kv->layout, .key = &*chunk_key, .object_bytes = total});
    }
    auto w = store_->NewWriter(ObjectKey(c.req.bucket, c.req.key));
    if (!w) return std::unexpected(FromStatus(w.error()));
    IoBuffer buf(piece);
    for (const auto& rd : readers) {
      for (uint64_t at = 0; at < rd->size();) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, rd->size() - at));
        auto part = buf.span().first(n);
        Status s = rd->ReadAt(at, part);
        if (s.ok() && verifier) {
          if (Status v = verifier->Feed(part); !v.ok())
            return Fail("InvalidChunkObject", v.ToString());
        }
        if (s.ok()) s = (*w)->Append(part);
        if (!s.ok()) return std::unexpected(FromStatus(s));
        at += n;
      }
    }
    if (verifier) {
      if (Status v = verifier->Finish(); !v.ok()) return Fail("InvalidChunkObject", v.ToString());
    }
    ObjectAttributes attrs = u->attrs;
    attrs.etag = ToHex(Md5(md5s)) + "-" + std::to_string(wanted.size());
    if (Status s = (*w)->SetAttributes(attrs.Encode()); !s.ok())
      return std::unexpected(FromStatus(s));
    if (Status s = (*w)->Commit(); !s.ok()) return std::unexpected(FromStatus(s));
    (void)DeleteUpload(*store_, id);
    return attrs.etag;
  });
  if (!done) co_return std::unexpected(done.error());
  XmlWriter w;
  w.Open("CompleteMultipartUploadResult", true);
  w.Element("Location", "/" + c.req.bucket + "/" + c.req.key);
  w.Element("Bucket", c.req.bucket);
  w.Element("Key", c.req.key);
  w.Element("ETag", "\"" + *done + "\"");
  w.Close("CompleteMultipartUploadResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::AbortMultipart(Ctx& c) {
  c.op = S3Op::kAbortMultipart;
  const std::string id = *c.req.Query("uploadId");
  auto s = co_await Blocking([&]() -> Status {
    OC_ASSIGN_OR_RETURN(UploadInfo u, LoadUpload(*store_, id));
    if (u.bucket != c.req.bucket || u.key != c.req.key) return NotFoundError("no such upload");
    return DeleteUpload(*store_, id);
  });
  if (s.code() == StatusCode::kNotFound) {
    co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
  }
  if (!s.ok()) co_return std::unexpected(FromStatus(s));
  {
    Headers h{{"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(204, std::move(h), "");
  }
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::ListUploads(Ctx& c) {
  c.op = S3Op::kOther;
  auto b = co_await FindBucket(c.req.bucket);
  if (!b) co_return std::unexpected(b.error());
  auto uploads =
      co_await Blocking([&]() -> Result<std::vector<std::pair<std::string, UploadInfo>>> {
        std::vector<std::pair<std::string, UploadInfo>> out;
        OC_RETURN_IF_ERROR(
            ForEachObject(*store_, std::string(kUploadPrefix), [&](const ObjectInfo& info) {
              std::string id = info.key.substr(kUploadPrefix.size());
              if (id.find('/') != std::string::npos) return;  // a part
              Result<UploadInfo> u = LoadUpload(*store_, id);
              if (u && u->bucket == c.req.bucket) out.emplace_back(id, std::move(*u));
            }));
        return out;
      });
  if (!uploads) co_return std::unexpected(FromStatus(uploads.error()));
  XmlWriter w;
  w.Open("ListMultipartUploadsResult", true);
  w.Element("Bucket", c.req.bucket);
  w.Element("IsTruncated", "false");
  for (const auto& [id, u] : *uploads) {
    w.Open("Upload");
    w.Element("Key", u.key);
    w.Element("UploadId", id);
    w.Element("Initiated", IsoTime(u.created));
    w.Element("StorageClass", "STANDARD");
    w.Close("Upload");
  }
  w.Close("ListMultipartUploadsResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

}  // namespace objectcache::server
