// S3 multipart uploads (docs/s3-api.md, "Multipart uploads").
//
// Store layout: upload U of bucket B keeps its record at ".uploads/B/U" (key, attributes,
// creation time) and its parts at ".parts/U/NNNNN". An upload id is 16 hex digits of its creation
// time and 16 random ones, so expired uploads are found from their names alone. Records and
// parts are records in the store's sense (store.h): capacity eviction never drops them; expiry
// (S3Options::upload_expiry) does, and a bucket holds at most max_uploads_per_bucket.
#include <strings.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "objectcache/chunk_object.h"
#include "s3/crypto.h"
#include "s3/xml.h"
#include "server/log.h"
#include "server/s3_body.h"
#include "server/s3_handler.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;
namespace {

constexpr std::string_view kUploadPrefix = ".uploads/";
constexpr std::string_view kPartPrefix = ".parts/";
// Before uploads were kept per bucket: nothing can complete these any more.
constexpr std::string_view kLegacyUploadPrefix = ".mpu/";
constexpr uint64_t kMinPartBytes = 5 << 20;
constexpr uint64_t kMaxParts = 10000;
constexpr size_t kMaxListed = 1000;  // uploads or parts per listing page

std::string BucketUploadsPrefix(const std::string& bucket) {
  return std::string(kUploadPrefix) + bucket + "/";
}
std::string UploadKey(const std::string& bucket, const std::string& id) {
  return BucketUploadsPrefix(bucket) + id;
}
std::string PartsPrefix(const std::string& id) { return std::string(kPartPrefix) + id + "/"; }
std::string PartKey(const std::string& id, uint64_t part) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%05u", static_cast<unsigned>(part));
  return PartsPrefix(id) + buf;
}

bool ValidUploadId(std::string_view id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string NewUploadId(int64_t now) {
  char created[17];
  std::snprintf(created, sizeof(created), "%016llx",
                static_cast<unsigned long long>(std::max<int64_t>(now, 0)));
  return created + RandomHex(8);
}

// The creation time written into an upload id by NewUploadId.
int64_t UploadIdCreated(std::string_view id) {
  uint64_t t = 0;
  for (char c : id.substr(0, 16))
    t = t * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  return static_cast<int64_t>(std::min<uint64_t>(t, INT64_MAX));
}

std::string Unquote(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

// Removes an upload's parts, then its record (so a crash in between leaves a record whose
// retried CompleteMultipartUpload still answers; see CompleteMultipart).
Status DeleteUpload(Store& store, const std::string& bucket, const std::string& id) {
  OC_RETURN_IF_ERROR(ForEachObject(store, PartsPrefix(id),
                                   [&](const ObjectInfo& p) { (void)store.Delete(p.key); }));
  Status s = store.Delete(UploadKey(bucket, id));
  return s.code() == StatusCode::kNotFound ? Status() : s;
}

}  // namespace

// NotFound for a malformed, unknown or expired id (an expired one is removed on the way).
Result<S3Handler::Upload> S3Handler::LoadUpload(const std::string& bucket, const std::string& id) {
  if (!ValidUploadId(id)) return NotFoundError("no such upload");
  if (UploadExpired(id)) {
    (void)DeleteUpload(*store_, bucket, id);
    return NotFoundError("upload expired");
  }
  OC_ASSIGN_OR_RETURN(std::string text,
                      ReadWholeObject(*store_, UploadKey(bucket, id), kMaxRecordBytes));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j["key"].is_string() || !j["created"].is_number_integer() ||
      !j["attrs"].is_string()) {
    return DataLossError("upload record " + id + " is damaged");
  }
  std::optional<ObjectAttributes> a = ObjectAttributes::Decode(j["attrs"].get<std::string>());
  if (!a) return DataLossError("upload record " + id + " is damaged");
  return Upload{
      .key = j["key"].get<std::string>(), .attrs = *a, .created = j["created"].get<int64_t>()};
}

bool S3Handler::UploadExpired(std::string_view id) const {
  return options_.now() - UploadIdCreated(id) >= options_.upload_expiry.count();
}

Result<size_t> S3Handler::RemoveExpiredUploads(const std::string& bucket) {
  size_t removed = 0;
  std::vector<std::pair<std::string, std::string>> expired;  // bucket, id
  const std::string prefix =
      bucket.empty() ? std::string(kUploadPrefix) : BucketUploadsPrefix(bucket);
  OC_RETURN_IF_ERROR(ForEachObject(*store_, prefix, [&](const ObjectInfo& info) {
    const std::string_view name = std::string_view(info.key).substr(kUploadPrefix.size());
    const size_t slash = name.rfind('/');
    if (slash == std::string_view::npos) return;
    const std::string_view id = name.substr(slash + 1);
    if (ValidUploadId(id) && UploadExpired(id)) {
      expired.emplace_back(std::string(name.substr(0, slash)), std::string(id));
    }
  }));
  for (const auto& [b, id] : expired) {
    if (DeleteUpload(*store_, b, id).ok()) ++removed;
  }
  if (bucket.empty()) {
    // Parts of an expired id whose record is gone (a part that finished uploading after the
    // sweep took its upload), and everything of the former layout.
    OC_RETURN_IF_ERROR(ForEachObject(*store_, std::string(kPartPrefix), [&](const ObjectInfo& p) {
      const std::string_view id = std::string_view(p.key).substr(kPartPrefix.size(), 32);
      if (ValidUploadId(id) && UploadExpired(id)) (void)store_->Delete(p.key);
    }));
    OC_RETURN_IF_ERROR(ForEachObject(*store_, std::string(kLegacyUploadPrefix),
                                     [&](const ObjectInfo& p) { (void)store_->Delete(p.key); }));
  }
  return removed;
}

Status S3Handler::RemoveBucketUploads(const std::string& bucket) {
  std::vector<std::string> ids;
  OC_RETURN_IF_ERROR(ForEachObject(*store_, BucketUploadsPrefix(bucket), [&](const ObjectInfo& i) {
    ids.push_back(i.key.substr(BucketUploadsPrefix(bucket).size()));
  }));
  for (const std::string& id : ids) OC_RETURN_IF_ERROR(DeleteUpload(*store_, bucket, id));
  return Status();
}

void S3Handler::ScheduleUploadSweep() {
  // Every quarter of the expiry, between once a second and once an hour (a sweep lists the
  // upload records and parts: on RADOS that enumerates the namespace).
  const auto period = std::clamp<std::chrono::seconds>(
      options_.upload_expiry / 4, std::chrono::seconds(1), std::chrono::hours(1));
  sweep_timer_.expires_after(period);
  sweep_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;  // cancelled: the handler is going away
    Result<size_t> removed = RemoveExpiredUploads("");
    if (!removed) {
      LogWarn("removing expired multipart uploads: " + removed.error().ToString());
    } else if (*removed > 0) {
      LogInfo("removed " + std::to_string(*removed) + " expired multipart upload(s)");
    }
    ScheduleUploadSweep();
  });
}

asio::awaitable<S3Result<void>> S3Handler::CreateMultipart(Ctx& c) {
  const int64_t now = options_.now();
  const std::string id = NewUploadId(now);
  nlohmann::json j;
  j["key"] = c.req.key;
  j["attrs"] = ObjectAttributes::FromRequest(c.req.headers).Encode();
  j["created"] = now;
  const std::string text = j.dump();
  const size_t cap = options_.max_uploads_per_bucket;
  auto created = co_await Blocking([&]() -> S3Result<void> {
    auto count = [&]() -> Result<size_t> {
      OC_ASSIGN_OR_RETURN(ListPage page, store_->List({.prefix = BucketUploadsPrefix(c.req.bucket),
                                                       .start_after = "",
                                                       .max_keys = cap + 1}));
      return page.objects.size();
    };
    Result<size_t> open = count();
    if (open && *open >= cap) {
      if (Result<size_t> r = RemoveExpiredUploads(c.req.bucket); !r) {
        return std::unexpected(FromStatus(r.error()));
      }
      open = count();
    }
    if (!open) return std::unexpected(FromStatus(open.error()));
    if (*open >= cap) {
      return Fail("InvalidRequest", "bucket " + c.req.bucket + " already has " +
                                        std::to_string(cap) +
                                        " unfinished multipart uploads "
                                        "(--max-uploads-per-bucket): complete or abort some first");
    }
    if (Status s = store_->Put(UploadKey(c.req.bucket, id), AsBytes(text)); !s.ok()) {
      return std::unexpected(FromStatus(s));
    }
    return S3Result<void>();
  });
  if (!created) co_return std::unexpected(created.error());
  XmlWriter w;
  w.Open("InitiateMultipartUploadResult", true);
  w.Element("Bucket", c.req.bucket);
  w.Element("Key", c.req.key);
  w.Element("UploadId", id);
  w.Close("InitiateMultipartUploadResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::UploadPart(Ctx& c) {
  const std::string id = *c.req.Query("uploadId");
  const std::string* pn = c.req.Query("partNumber");
  uint64_t part = 0;
  if (pn == nullptr || !ParseDecimal(*pn, &part) || part < 1 || part > kMaxParts) {
    co_return Fail("InvalidArgument", "partNumber must be an integer from 1 to 10000");
  }
  if (c.req.Header("x-amz-copy-source"))
    co_return Fail("NotImplemented", "UploadPartCopy is not implemented");
  auto upload = co_await Blocking([&] { return LoadUpload(c.req.bucket, id); });
  if (!upload || upload->key != c.req.key) {
    co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
  }
  // Locals, not temporaries, for the reference parameters: GCC 12 destroys temporaries in a
  // co_await expression wrongly (a double free).
  const std::optional<ModelPreset> plain;
  const PutOptions unconditional;
  auto stored =
      co_await ReceiveBody(c, PartKey(id, part), ObjectAttributes(), plain, unconditional);
  if (!stored) co_return std::unexpected(stored.error());
  co_return co_await ReplyStored(c, *stored);
}

asio::awaitable<S3Result<void>> S3Handler::ListParts(Ctx& c) {
  const std::string id = *c.req.Query("uploadId");
  auto max_parts = QueryNumber(c.req, "max-parts", kMaxListed, kMaxListed);
  if (!max_parts) co_return std::unexpected(max_parts.error());
  auto marker = QueryNumber(c.req, "part-number-marker", 0, kMaxParts);
  if (!marker) co_return std::unexpected(marker.error());
  struct Part {
    uint64_t number;
    uint64_t size;
    std::string etag;
    int64_t mtime;
  };
  struct Page {
    std::vector<Part> parts;
    bool truncated = false;
  };
  auto page = co_await Blocking([&]() -> Result<Page> {
    OC_ASSIGN_OR_RETURN(Upload u, LoadUpload(c.req.bucket, id));
    if (u.key != c.req.key) return NotFoundError("no such upload");
    Page out;
    ListOptions o{.prefix = PartsPrefix(id),
                  .start_after = *marker > 0 ? PartKey(id, *marker) : std::string(),
                  .max_keys = *max_parts + 1};
    OC_ASSIGN_OR_RETURN(ListPage listed, store_->List(o));
    for (const ObjectInfo& p : listed.objects) {
      if (out.parts.size() == *max_parts) {
        out.truncated = *max_parts > 0;  // max-parts=0 asks for nothing: nothing is cut short
        break;
      }
      uint64_t number = 0;
      if (!ParseDecimal(std::string_view(p.key).substr(PartsPrefix(id).size()), &number)) continue;
      auto rd = store_->OpenReader(p.key);
      if (!rd) continue;  // replaced or removed meanwhile
      auto a = ObjectAttributes::Decode((*rd)->attributes());
      out.parts.push_back({number, (*rd)->size(), a ? a->etag : "", (*rd)->mtime()});
    }
    return out;
  });
  if (!page) {
    if (page.error().code() == StatusCode::kNotFound) {
      co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
    }
    co_return std::unexpected(FromStatus(page.error()));
  }
  XmlWriter w;
  w.Open("ListPartsResult", true);
  w.Element("Bucket", c.req.bucket);
  w.Element("Key", c.req.key);
  w.Element("UploadId", id);
  WriteOwner(&w, "Initiator");
  WriteOwner(&w);
  w.Element("StorageClass", "STANDARD");
  w.Element("PartNumberMarker", std::to_string(*marker));
  if (!page->parts.empty()) {
    w.Element("NextPartNumberMarker", std::to_string(page->parts.back().number));
  }
  w.Element("MaxParts", std::to_string(*max_parts));
  w.Element("IsTruncated", page->truncated ? "true" : "false");
  for (const Part& p : page->parts) {
    w.Open("Part");
    w.Element("PartNumber", std::to_string(p.number));
    w.Element("LastModified", IsoTime(p.mtime));
    w.Element("ETag", "\"" + p.etag + "\"");
    w.Element("Size", std::to_string(p.size));
    w.Close("Part");
  }
  w.Close("ListPartsResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::CompleteMultipart(Ctx& c) {
  const std::string id = *c.req.Query("uploadId");
  auto body = co_await ReadSmallBody(c, 4 << 20);
  if (!body) co_return std::unexpected(body.error());
  XmlElement root;
  std::string why;
  if (!ParseXml(*body, &root, &why) || root.name != "CompleteMultipartUpload") {
    co_return Fail("MalformedXML", "CompleteMultipartUpload body: " + why);
  }
  std::vector<std::pair<uint64_t, std::string>> wanted;
  for (const XmlElement& p : root.children) {
    if (p.name != "Part") continue;
    const XmlElement* n = p.Child("PartNumber");
    const XmlElement* e = p.Child("ETag");
    uint64_t number = 0;
    if (n == nullptr || e == nullptr || !ParseDecimal(n->text, &number) || number < 1 ||
        number > kMaxParts) {
      co_return Fail("MalformedXML", "each <Part> needs <PartNumber> (1 to 10000) and <ETag>");
    }
    if (!wanted.empty() && number <= wanted.back().first) {
      co_return Fail("InvalidPartOrder", "The list of parts was not in ascending order.");
    }
    wanted.emplace_back(number, Unquote(e->text));
  }
  if (wanted.empty()) co_return Fail("MalformedXML", "no parts given");
  // The ETag the object gets: MD5 of the parts' MD5s, then the part count. Known before any
  // part is read, so a retried complete whose first attempt finished (or crashed after the
  // commit) is recognised by the object it made.
  std::string md5s;
  for (const auto& [number, etag] : wanted) {
    std::string raw;
    if (!DecodeHexDigest(etag, &raw)) {
      co_return Fail("InvalidPart", "part " + std::to_string(number) + " has a malformed ETag");
    }
    md5s += raw;
  }
  const std::string final_etag = ToHex(Md5(md5s)) + "-" + std::to_string(wanted.size());
  const std::optional<ModelPreset>& kv = c.bucket.layout;
  std::optional<ChunkKey> chunk_key;
  if (kv) {
    Result<ChunkKey> k = ChunkKey::FromHex(c.req.key);
    if (!k)
      co_return Fail("InvalidChunkObject", "objects in a KV bucket are named by their chunk key");
    chunk_key = *k;
  }
  S3Result<WriteCondition> condition = ParseWriteCondition(c.req);
  if (!condition) co_return std::unexpected(condition.error());
  // A checksum of the whole object (x-amz-checksum-type: FULL_OBJECT, as the AWS CLI sends it) is
  // computed over the parts as they are joined, checked, and kept. Any other (a composite one,
  // of the parts' checksums) is not computed here and is passed over.
  S3Result<std::optional<RequestChecksum>> whole = RequestChecksum::Of(c.req);
  if (!whole) co_return std::unexpected(whole.error());
  const std::string* checksum_type = c.req.Header("x-amz-checksum-type");
  if (!checksum_type || strcasecmp(checksum_type->c_str(), "FULL_OBJECT") != 0) whole->reset();
  const std::string object_key = ObjectKey(c.req.bucket, c.req.key);
  const size_t piece = options_.io_buffer_bytes;
  MemoryBudget::Lease lease = memory_.NewLease();
  if (!lease.GrowTo(piece)) co_return MemoryBudgetExhausted();
  auto done = co_await Blocking([&]() -> S3Result<std::string> {
    // A retry of a complete that already committed: the object carries this upload's ETag.
    auto already_completed = [&]() -> bool {
      Result<std::unique_ptr<ObjectReader>> rd = store_->OpenReader(object_key);
      if (!rd) return false;
      std::optional<ObjectAttributes> a = ObjectAttributes::Decode((*rd)->attributes());
      if (!a || a->etag != final_etag) return false;
      (void)DeleteUpload(*store_, c.req.bucket, id);  // what a crash may have left
      return true;
    };
    Result<Upload> u = LoadUpload(c.req.bucket, id);
    if (!u || u->key != c.req.key) {
      if (already_completed()) return final_etag;
      return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
    }
    // Check every part before writing anything.
    std::vector<std::unique_ptr<ObjectReader>> readers;
    uint64_t total = 0;
    for (size_t i = 0; i < wanted.size(); ++i) {
      auto rd = store_->OpenReader(PartKey(id, wanted[i].first));
      std::optional<ObjectAttributes> a;
      if (rd) a = ObjectAttributes::Decode((*rd)->attributes());
      if (!rd || !a || a->etag != wanted[i].second) {
        if (already_completed()) return final_etag;
        return Fail("InvalidPart", "part " + std::to_string(wanted[i].first) +
                                       " was not uploaded or its ETag does not match");
      }
      if (i + 1 < wanted.size() && (*rd)->size() < kMinPartBytes) {
        return Fail("EntityTooSmall", "part " + std::to_string(wanted[i].first) +
                                          " is smaller than the 5 MiB minimum");
      }
      total += (*rd)->size();
      readers.push_back(std::move(*rd));
    }
    // Checked once the upload is known to be live, so that a retried complete is recognised
    // above even when its If-Match named the version the first attempt replaced.
    S3Result<PutOptions> put = ConditionalPutOptions(*condition, object_key);
    if (!put) return std::unexpected(put.error());
    std::optional<ChunkStreamVerifier> verifier;
    if (kv) {
      verifier.emplace(
          ChunkExpectation{.layout = &kv->layout, .key = &*chunk_key, .object_bytes = total});
    }
    auto w = store_->NewWriter(object_key, *put);
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
        if (s.ok() && *whole) (*whole)->algorithm.Update(part);
        if (s.ok()) s = (*w)->Append(part);
        if (!s.ok()) return std::unexpected(FromStatus(s));
        at += n;
      }
    }
    if (verifier) {
      if (Status v = verifier->Finish(); !v.ok()) return Fail("InvalidChunkObject", v.ToString());
    }
    ObjectAttributes attrs = u->attrs;
    attrs.etag = final_etag;
    if (*whole) {
      const std::string& name = (*whole)->algorithm.header();
      if ((*whole)->algorithm.FinishBase64() != (*whole)->value) {
        return Fail("BadDigest",
                    "The " + name + " you specified did not match the calculated checksum.");
      }
      attrs.checksum.emplace(name, (*whole)->value);
    }
    if (Status s = (*w)->SetAttributes(attrs.Encode()); !s.ok())
      return std::unexpected(FromStatus(s));
    if (Status s = (*w)->Commit(); !s.ok()) return std::unexpected(CommitFailure(s, *put));
    (void)DeleteUpload(*store_, c.req.bucket, id);
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
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::AbortMultipart(Ctx& c) {
  const std::string id = *c.req.Query("uploadId");
  auto s = co_await Blocking([&]() -> Status {
    OC_ASSIGN_OR_RETURN(Upload u, LoadUpload(c.req.bucket, id));
    if (u.key != c.req.key) return NotFoundError("no such upload");
    return DeleteUpload(*store_, c.req.bucket, id);
  });
  if (s.code() == StatusCode::kNotFound) {
    co_return Fail("NoSuchUpload", "The specified multipart upload does not exist.");
  }
  if (!s.ok()) co_return std::unexpected(FromStatus(s));
  co_return co_await Reply(c, 204);
}

asio::awaitable<S3Result<void>> S3Handler::ListUploads(Ctx& c) {
  const S3Request& r = c.req;
  auto max_uploads = QueryNumber(r, "max-uploads", kMaxListed, kMaxListed);
  if (!max_uploads) co_return std::unexpected(max_uploads.error());
  const std::string prefix = r.QueryValue("prefix"), key_marker = r.QueryValue("key-marker");
  const std::string delimiter = r.QueryValue("delimiter");
  const std::string id_marker = r.QueryValue("upload-id-marker");
  auto url_encoded = QueryUrlEncoding(r);
  if (!url_encoded) co_return std::unexpected(url_encoded.error());
  const bool url = *url_encoded;
  // A bucket holds at most max_uploads_per_bucket uploads (plus those being created), so the
  // page is made from all of them, sorted as S3 sorts: by key, then by upload id.
  auto uploads = co_await Blocking([&]() -> Result<std::vector<std::pair<std::string, Upload>>> {
    std::vector<std::string> ids;
    OC_RETURN_IF_ERROR(
        ForEachObject(*store_, BucketUploadsPrefix(r.bucket), [&](const ObjectInfo& i) {
          ids.push_back(i.key.substr(BucketUploadsPrefix(r.bucket).size()));
        }));
    std::vector<std::pair<std::string, Upload>> out;
    for (const std::string& id : ids) {
      Result<Upload> u = LoadUpload(r.bucket, id);
      if (u && u->key.starts_with(prefix)) out.emplace_back(id, std::move(*u));
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
      return std::tie(x.second.key, x.first) < std::tie(y.second.key, y.first);
    });
    return out;
  });
  if (!uploads) co_return std::unexpected(FromStatus(uploads.error()));
  auto after_markers = [&](const std::pair<std::string, Upload>& u) {
    if (key_marker.empty()) return true;
    if (u.second.key != key_marker) return u.second.key > key_marker;
    return !id_marker.empty() && u.first > id_marker;
  };
  // The page: uploads, and with a delimiter the common prefixes that stand for the uploads of
  // keys under them, each counting as one entry.
  std::vector<const std::pair<std::string, Upload>*> page;
  std::vector<std::string> prefixes;
  bool truncated = false;
  std::string next_key, next_id;
  for (const auto& u : *uploads) {
    if (!after_markers(u)) continue;
    std::string common;
    if (!delimiter.empty()) {
      if (size_t d = u.second.key.find(delimiter, prefix.size()); d != std::string::npos) {
        common = u.second.key.substr(0, d + delimiter.size());
      }
    }
    // A prefix at or before the key marker was on an earlier page; one just added covers this.
    if (!common.empty() && ((!prefixes.empty() && prefixes.back() == common) ||
                            (!key_marker.empty() && common <= key_marker))) {
      continue;
    }
    if (page.size() + prefixes.size() == *max_uploads) {
      truncated = *max_uploads > 0;
      break;
    }
    if (common.empty()) {
      page.push_back(&u);
      next_key = u.second.key;
      next_id = u.first;
    } else {
      prefixes.push_back(common);
      next_key = common;
      next_id.clear();
    }
  }
  XmlWriter w;
  w.Open("ListMultipartUploadsResult", true);
  w.Element("Bucket", r.bucket);
  w.Element("KeyMarker", ListingName(key_marker, url));
  w.Element("UploadIdMarker", id_marker);
  if (truncated) {
    w.Element("NextKeyMarker", ListingName(next_key, url));
    w.Element("NextUploadIdMarker", next_id);
  }
  w.Element("Prefix", ListingName(prefix, url));
  if (!delimiter.empty()) w.Element("Delimiter", ListingName(delimiter, url));
  if (url) w.Element("EncodingType", "url");
  w.Element("MaxUploads", std::to_string(*max_uploads));
  w.Element("IsTruncated", truncated ? "true" : "false");
  for (const auto* u : page) {
    w.Open("Upload");
    w.Element("Key", ListingName(u->second.key, url));
    w.Element("UploadId", u->first);
    WriteOwner(&w, "Initiator");
    WriteOwner(&w);
    w.Element("StorageClass", "STANDARD");
    w.Element("Initiated", IsoTime(u->second.created));
    w.Close("Upload");
  }
  WriteCommonPrefixes(&w, prefixes, url);
  w.Close("ListMultipartUploadsResult");
  co_return co_await ReplyXml(c, w.Finish());
}

}  // namespace objectcache::server
