// S3 object operations (buckets are in s3_buckets.cc, multipart uploads in s3_multipart.cc).
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <tuple>

#include "objectcache/chunk_object.h"
#include "s3/crypto.h"
#include "s3/xml.h"
#include "server/conditions.h"
#include "server/s3_handler.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

asio::awaitable<S3Result<void>> S3Handler::PutObject(Ctx& c) {
  S3Result<WriteCondition> condition = ParseWriteCondition(c.req);
  if (!condition) co_return std::unexpected(condition.error());
  const std::string store_key = ObjectKey(c.req.bucket, c.req.key);
  S3Result<PutOptions> put = PutOptions{};
  if (condition->create_only || condition->if_match) {
    put = co_await Blocking([&] { return ConditionalPutOptions(*condition, store_key); });
    if (!put) co_return std::unexpected(put.error());
  }
  auto stored = co_await ReceiveBody(c, store_key, ObjectAttributes::FromRequest(c.req.headers),
                                     c.bucket.layout, *put);
  if (!stored) co_return std::unexpected(stored.error());
  co_return co_await ReplyStored(c, *stored);
}

namespace {

// Sizes `s` to `n` bytes that are about to be read into: no zero-filling of a body first. The
// operation returns `n` itself, not the size it is handed: GCC 12's libstdc++ hands it the new
// capacity when the string grows (18 bytes from empty gives 30).
void ResizeForOverwrite(std::string* s, size_t n) {
  s->resize_and_overwrite(n, [n](char*, size_t) { return n; });
}

// A body of at least this many bytes is sent from its file when it can be: below it, the copy
// through memory costs less than the system calls of a separate header and sendfile.
constexpr uint64_t kMinSendFileBytes = 16 << 10;

}  // namespace

asio::awaitable<S3Result<void>> S3Handler::GetObject(Ctx& c, bool head) {
  const S3Request& r = c.req;
  // Open the object and, when it is small, read it: on this thread when that cannot block (an
  // open file, bytes in the page cache), else in one trip to the pool.
  const size_t piece = options_.io_buffer_bytes;
  const std::string store_key = ObjectKey(r.bucket, r.key);
  const bool want_small = !head && !r.Header("range");
  // Whether the bytes of `rd` go from its file to the socket (below) rather than through memory.
  auto by_file = [&](const ObjectReader& rd, uint64_t bytes) {
    return bytes >= kMinSendFileBytes && c.ex.sends_files() && rd.file_extent().has_value();
  };
  auto small_wanted = [&](const ObjectReader& rd) {
    return want_small && rd.size() <= piece && !by_file(rd, rd.size());
  };
  std::string small_body;
  auto read_small = [&](const ObjectReader& rd, bool blocking) -> Status {
    if (!small_wanted(rd)) return Status();
    ResizeForOverwrite(&small_body, rd.size());
    auto dest = AsWritableBytes(small_body);
    return blocking ? rd.ReadAt(0, dest) : rd.ReadAtIfCached(0, dest);
  };
  Result<std::unique_ptr<ObjectReader>> reader = store_->OpenReaderIfCached(store_key);
  if (reader && !read_small(**reader, false).ok()) small_body.clear();
  const bool fast =
      reader.has_value() && (small_body.size() == (*reader)->size() || !small_wanted(**reader));
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
  if (std::optional<std::string> bad = attrs->OverrideFromQuery(r.query)) {
    co_return Fail("InvalidArgument", *bad + " holds a control character");
  }
  const uint64_t size = obj.size();
  const std::time_t mtime = obj.mtime();

  // Conditions (RFC 9110 13.2.2), then the range: a pure function each (conditions.h).
  const ConditionOutcome outcome =
      EvaluateConditions({.if_match = r.Header("if-match"),
                          .if_none_match = r.Header("if-none-match"),
                          .if_modified_since = r.Header("if-modified-since"),
                          .if_unmodified_since = r.Header("if-unmodified-since")},
                         attrs->etag, mtime);
  if (outcome == ConditionOutcome::kPreconditionFailed) {
    co_return PreconditionFailed();
  }
  Headers h{{"Last-Modified", HttpTime(mtime)},
            {"Accept-Ranges", "bytes"},
            {"x-amz-request-id", c.request_id}};
  attrs->AddTo(&h);
  if (outcome == ConditionOutcome::kNotModified) {
    (void)co_await c.ex.RespondHeaderOnly(304, std::move(h), 0);
    co_return S3Result<void>();
  }
  uint64_t first = 0, last = size;
  unsigned status = 200;
  if (const std::string* range = r.Header("range")) {
    auto parsed = EvaluateRange(*range, size);
    if (!parsed) co_return std::unexpected(parsed.error());
    if (*parsed) {
      first = (*parsed)->first;
      last = (*parsed)->end;
      status = 206;
      h.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" +
                                          std::to_string(last - 1) + "/" + std::to_string(size));
    }
  }
  const std::string* checksum_mode = r.Header("x-amz-checksum-mode");
  if (status == 200 && checksum_mode && strcasecmp(checksum_mode->c_str(), "ENABLED") == 0) {
    attrs->AddChecksumTo(&h);  // of the whole object only
  }
  if (head) {
    (void)co_await c.ex.RespondHeaderOnly(status, std::move(h), last - first);
    co_return S3Result<void>();
  }
  if (small_body.size() == size && first == 0 && last == size) {
    (void)co_await c.ex.Respond(status, std::move(h), std::move(small_body));
    co_return S3Result<void>();
  }
  // On a connection that sends files, from a store that keeps its bytes in a file: from the page
  // cache to the socket without a copy (as nginx sends static files). Only when the page cache
  // holds the range's ends (a cold object is read on the pool, below, so the event loop never
  // waits for a disk).
  if (std::optional<ObjectReader::FileExtent> file = obj.file_extent();
      file && by_file(obj, last - first) && InPageCache(obj, first, last)) {
    (void)co_await c.ex.RespondWithFile(
        status, std::move(h),
        {.fd = file->fd, .offset = file->base + first, .length = last - first});
    co_return S3Result<void>();
  }
  if (last - first <= piece) {
    std::string body;
    ResizeForOverwrite(&body, last - first);
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

asio::awaitable<S3Result<void>> S3Handler::GetObjectAttributes(Ctx& c) {
  const S3Request& r = c.req;
  // x-amz-object-attributes: which of these to answer, comma-separated.
  const std::string* list = r.Header("x-amz-object-attributes");
  if (list == nullptr) {
    co_return Fail("InvalidArgument", "x-amz-object-attributes must name the attributes wanted");
  }
  static constexpr std::string_view kNames[] = {"ETag", "Checksum", "ObjectParts", "StorageClass",
                                                "ObjectSize"};
  bool wanted[std::size(kNames)] = {};
  for (std::string_view rest = *list; !rest.empty();) {
    const size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    const auto* it = std::find(std::begin(kNames), std::end(kNames), name);
    if (it == std::end(kNames)) {
      co_return Fail("InvalidArgument",
                     "Invalid attribute name specified: '" + std::string(name.substr(0, 64)) + "'");
    }
    wanted[it - std::begin(kNames)] = true;
  }
  auto version = co_await Blocking([&] { return OpenObjectVersion(ObjectKey(r.bucket, r.key)); });
  if (!version) co_return std::unexpected(version.error());
  const ObjectAttributes& attrs = version->attributes;
  const ObjectReader& reader = *version->reader;
  XmlWriter w;
  w.Open("GetObjectAttributesResponse", true);
  if (wanted[0]) w.Element("ETag", attrs.etag);
  // Checksum (wanted[1]): the one the object was stored with (x-amz-checksum-crc32 is
  // <ChecksumCRC32>), none for an object stored without one, as S3 answers.
  if (wanted[1] && attrs.checksum) {
    std::string algorithm =
        attrs.checksum->first.substr(std::string_view("x-amz-checksum-").size());
    for (char& ch : algorithm) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    w.Open("Checksum");
    w.Element("Checksum" + algorithm, attrs.checksum->second);
    w.Element("ChecksumType", "FULL_OBJECT");
    w.Close("Checksum");
  }
  if (const size_t dash = attrs.etag.rfind('-'); wanted[2] && dash != std::string::npos) {
    // A multipart object: its part count. The parts themselves are not kept after completion
    // (S3 lists them only for uploads made with checksums).
    w.Open("ObjectParts");
    w.Element("PartsCount", attrs.etag.substr(dash + 1));  // SDKs: TotalPartsCount
    w.Close("ObjectParts");
  }
  if (wanted[3]) w.Element("StorageClass", "STANDARD");
  if (wanted[4]) w.Element("ObjectSize", std::to_string(reader.size()));
  w.Close("GetObjectAttributesResponse");
  Headers h{{"Content-Type", "application/xml"}, {"Last-Modified", HttpTime(reader.mtime())}};
  co_return co_await Reply(c, 200, std::move(h), w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::DeleteObject(Ctx& c) {
  const S3Request& r = c.req;
  S3Result<DeleteConditions> conditions =
      ParseDeleteConditions(r.Header("if-match"), r.Header("x-amz-if-match-last-modified-time"),
                            r.Header("x-amz-if-match-size"));
  if (!conditions) co_return std::unexpected(conditions.error());
  S3Result<void> deleted =
      co_await Blocking([&] { return DeleteObjectIf(ObjectKey(r.bucket, r.key), *conditions); });
  if (!deleted) co_return std::unexpected(deleted.error());
  co_return co_await Reply(c, 204);
}

asio::awaitable<S3Result<void>> S3Handler::CopyObject(Ctx& c) {
  const S3Request& r = c.req;
  std::string source;
  std::string_view raw_source = *r.Header("x-amz-copy-source");
  if (size_t q = raw_source.find('?'); q != std::string_view::npos) {
    // bucket/key?versionId=ID names one version; each object has one, "null", as on GetObject.
    const std::string_view query = raw_source.substr(q + 1);
    if (query.starts_with("versionId=") && query != "versionId=null")
      co_return Fail("NoSuchVersion", "The specified version does not exist.");
    raw_source = raw_source.substr(0, q);
  }
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
  if (directive && *directive != "COPY" && *directive != "REPLACE") {
    co_return Fail("InvalidArgument", "Unknown metadata directive.");  // S3's words
  }
  const bool replace = directive && *directive == "REPLACE";
  if (src_bucket == r.bucket && src_key == r.key && !replace) {
    co_return Fail("InvalidRequest",
                   "This copy request is illegal because it is trying to copy an object to itself "
                   "without changing the object's metadata.");
  }
  auto src_object =
      co_await Blocking([&] { return OpenObjectVersion(ObjectKey(src_bucket, src_key)); });
  if (!src_object) co_return std::unexpected(src_object.error());
  const std::unique_ptr<ObjectReader>& reader = src_object->reader;
  const ObjectAttributes& source_attrs = src_object->attributes;
  // The source's conditions (x-amz-copy-source-if-*): any that fails is 412, 304 included.
  const ConditionOutcome source_outcome =
      EvaluateConditions({.if_match = r.Header("x-amz-copy-source-if-match"),
                          .if_none_match = r.Header("x-amz-copy-source-if-none-match"),
                          .if_modified_since = r.Header("x-amz-copy-source-if-modified-since"),
                          .if_unmodified_since = r.Header("x-amz-copy-source-if-unmodified-since")},
                         source_attrs.etag, reader->mtime());
  if (source_outcome != ConditionOutcome::kProceed) co_return PreconditionFailed();
  // The destination's, as on PutObject (If-None-Match: *, If-Match).
  S3Result<WriteCondition> condition = ParseWriteCondition(r);
  if (!condition) co_return std::unexpected(condition.error());
  // What the copy stores: the request's metadata (REPLACE) or the source's; the ETag is set below.
  ObjectAttributes out = replace ? ObjectAttributes::FromRequest(r.headers) : source_attrs;
  out.checksum = source_attrs.checksum;  // of the same bytes
  const std::optional<ModelPreset>& kv = c.bucket.layout;
  std::optional<ChunkKey> chunk_key;
  if (kv) {
    Result<ChunkKey> k = ChunkKey::FromHex(r.key);
    if (!k)
      co_return Fail("InvalidChunkObject", "objects in a KV bucket are named by their chunk key");
    chunk_key = *k;
  }
  const size_t piece = options_.io_buffer_bytes;
  const std::string dest_key = ObjectKey(r.bucket, r.key);
  auto copied = co_await Blocking([&]() -> S3Result<std::string> {
    S3Result<PutOptions> put = ConditionalPutOptions(*condition, dest_key);
    if (!put) return std::unexpected(put.error());
    const Status s = [&]() -> Status {
      const ObjectReader& src = *reader;
      std::optional<ChunkStreamVerifier> verifier;
      if (kv) {
        verifier.emplace(ChunkExpectation{
            .layout = &kv->layout, .key = &*chunk_key, .object_bytes = src.size()});
      }
      OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectWriter> w, store_->NewWriter(dest_key, *put));
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
      out.etag = ToHex(md5.Finish());
      OC_RETURN_IF_ERROR(w->SetAttributes(out.Encode()));
      return w->Commit();
    }();
    if (s.ok()) return out.etag;
    if (kv && (s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument)) {
      return Fail("InvalidChunkObject", s.ToString());
    }
    return std::unexpected(CommitFailure(s, *put));
  });
  if (!copied) co_return std::unexpected(copied.error());
  XmlWriter w;
  w.Open("CopyObjectResult", true);
  w.Element("LastModified", IsoTime(std::time(nullptr)));
  w.Element("ETag", "\"" + *copied + "\"");
  w.Close("CopyObjectResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::DeleteObjects(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 2 << 20);
  if (!body) co_return std::unexpected(body.error());
  XmlElement root;
  std::string why;
  if (!ParseXml(*body, &root, &why) || root.name != "Delete") {
    co_return Fail("MalformedXML", "DeleteObjects body: " + (why.empty() ? "not <Delete>" : why));
  }
  // Each object: its key, whether it named version "null", and its conditions (or the error
  // that makes it fail before anything is deleted: another version, an unreadable condition).
  struct Target {
    std::string key;
    bool versioned = false;
    S3Result<DeleteConditions> conditions;
  };
  std::vector<Target> targets;
  for (const XmlElement& o : root.children) {
    if (o.name != "Object") continue;
    const XmlElement* k = o.Child("Key");
    if (k == nullptr || k->text.empty()) co_return Fail("MalformedXML", "<Object> without <Key>");
    if (targets.size() == 1000)
      co_return Fail("MalformedXML", "at most 1000 keys per DeleteObjects");
    auto text = [&o](const char* name) {
      const XmlElement* e = o.Child(name);
      return e == nullptr ? nullptr : &e->text;
    };
    Target t{
        .key = k->text,
        .versioned = text("VersionId") != nullptr,
        .conditions = ParseDeleteConditions(text("ETag"), text("LastModifiedTime"), text("Size"))};
    if (t.versioned && *text("VersionId") != "null") {
      t.conditions = Fail("NoSuchVersion", "The specified version does not exist.");
    } else if (t.key.size() > kMaxS3KeyBytes) {
      t.conditions = Fail("KeyTooLongError", "Your key is too long (at most 1024 bytes)");
    }
    targets.push_back(std::move(t));
  }
  const XmlElement* quiet = root.Child("Quiet");
  const bool is_quiet = quiet && quiet->text == "true";
  auto results = co_await Blocking([&] {
    std::vector<S3Result<void>> out;
    for (const Target& t : targets) {
      if (!t.conditions) {
        out.push_back(std::unexpected(t.conditions.error()));
      } else {
        out.push_back(DeleteObjectIf(ObjectKey(c.req.bucket, t.key), *t.conditions));
      }
    }
    return out;
  });
  XmlWriter w;
  w.Open("DeleteResult", true);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (results[i].has_value()) {
      if (is_quiet) continue;
      w.Open("Deleted");
      w.Element("Key", targets[i].key);
      if (targets[i].versioned) w.Element("VersionId", "null");
      w.Close("Deleted");
    } else {
      const S3Error& e = results[i].error();
      w.Open("Error");
      w.Element("Key", targets[i].key);
      w.Element("Code", e.code);
      w.Element("Message", e.message);
      w.Close("Error");
    }
  }
  w.Close("DeleteResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::GetObjectBody(Ctx& c) { return GetObject(c, false); }
asio::awaitable<S3Result<void>> S3Handler::HeadObject(Ctx& c) { return GetObject(c, true); }

}  // namespace objectcache::server
