#include "server/s3_handler.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "s3/aws_chunked.h"
#include "s3/crypto.h"
#include "s3/sigv2.h"
#include "s3/xml.h"
#include "server/log.h"
#include "server/metrics_handler.h"
#include "server/object_attributes.h"
#include "server/s3_routes.h"
#include "wire/bounded_json.h"
#include "wire/lookup_wire.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

namespace {

constexpr size_t kMaxS3KeyBytes = 1024;
constexpr uint64_t kMaxPinSeconds = 365ull * 24 * 3600;

bool ValidBucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(b.front()) && alnum(b.back()) && b.find("..") == std::string_view::npos;
}

// AWS's rules for a new bucket's name, past ValidBucketName: no period next to a hyphen, not an
// IPv4 address, none of the prefixes and suffixes AWS reserves. Only creation checks them, so
// buckets made before keep working.
bool ValidNewBucketName(std::string_view b) {
  if (!ValidBucketName(b) || b.find(".-") != std::string_view::npos ||
      b.find("-.") != std::string_view::npos) {
    return false;
  }
  for (std::string_view prefix : {"xn--", "sthree-", "amzn-s3-demo-"}) {
    if (b.starts_with(prefix)) return false;
  }
  for (std::string_view suffix : {"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"}) {
    if (b.ends_with(suffix)) return false;
  }
  // Four dot-separated decimal numbers: formatted as an IP address.
  int parts = 0;
  bool digits_only = true;
  for (size_t start = 0; start <= b.size(); ++parts) {
    size_t dot = std::min(b.find('.', start), b.size());
    std::string_view part = b.substr(start, dot - start);
    digits_only = digits_only && !part.empty() && part.size() <= 3 &&
                  part.find_first_not_of("0123456789") == std::string_view::npos;
    start = dot + 1;
  }
  return !(digits_only && parts == 4);
}

}  // namespace

S3Handler::S3Handler(Store* store, ServerMetrics* metrics, S3Options options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      pacer_(options_.policy, options_.bandwidth_cap,
             [] {
               return std::chrono::duration<double>(
                          std::chrono::steady_clock::now().time_since_epoch())
                   .count();
             }),
      pool_(std::max(1u, options_.blocking_threads)),
      memory_(options_.request_memory_bytes),
      open_batch_objects_(options_.max_open_batch_objects),
      windows_(std::make_shared<WindowBuffers>(&memory_, 4 * options_.layerwise_window_bytes)),
      sweep_strand_(asio::make_strand(pool_.get_executor())),
      sweep_timer_(sweep_strand_),
      credentials_(std::make_shared<const Credentials>(options_.credentials)) {
  if (options_.anonymous) {
    LogWarn(
        "ANONYMOUS MODE: requests are not authenticated; anyone who can reach this port can "
        "read, write and delete every object. For local development only.");
  }
  asio::post(sweep_strand_, [this] { ScheduleUploadSweep(); });
}

S3Handler::~S3Handler() { Quiesce(); }

void S3Handler::Quiesce() {
  if (stopping_.exchange(true)) return;
  // The armed sweep timer is work that would keep join() waiting: cancel it on its strand.
  asio::post(sweep_strand_, [this] { sweep_timer_.cancel(); });
  pool_.join();
}

asio::awaitable<void> S3Handler::SendXml(Ctx& c, unsigned status, std::string xml) {
  Headers h{{"Content-Type", "application/xml"}, {"x-amz-request-id", c.request_id}};
  (void)co_await c.ex.Respond(status, std::move(h), std::move(xml));
}

asio::awaitable<void> S3Handler::SendError(Ctx& c, const S3Error& e) {
  S3Error err = e;
  if (err.resource.empty()) err.resource = c.req.raw_path;
  Headers h{{"Content-Type", "application/xml"}, {"x-amz-request-id", c.request_id}};
  const int status = err.HttpStatus();
  LogDebug(c.req.method + " " + c.req.raw_path + " -> " + std::to_string(status) + " " + err.code +
           ": " + err.message);
  if (c.req.method == "HEAD" || status == 304) {
    (void)co_await c.ex.RespondHeaderOnly(static_cast<unsigned>(status), std::move(h), 0);
  } else {
    (void)co_await c.ex.Respond(static_cast<unsigned>(status), std::move(h),
                                err.ToXml(c.request_id));
  }
}

asio::awaitable<void> S3Handler::Handle(HttpExchange& ex) {
  S3Result<S3Request> parsed =
      ParseS3Request(ex.method(), ex.target(), ex.RequestHeaders(), options_.virtual_host_domains);
  co_await HandleParsed(ex, parsed);
}

asio::awaitable<void> S3Handler::HandleParsed(HttpExchange& ex, S3Result<S3Request>& parsed) {
  const auto start = std::chrono::steady_clock::now();
  Ctx c{ex, {}, std::nullopt, "", S3Op::kOther};
  char id[24];
  std::snprintf(id, sizeof(id), "%016llx",
                static_cast<unsigned long long>(request_counter_.fetch_add(1) + 1));
  c.request_id = id;
  S3Result<void> result;
  if (!parsed) {
    c.req.method = std::string(ex.method());
    result = std::unexpected(parsed.error());
  } else {
    c.req = std::move(*parsed);
    result = co_await Dispatch(c);
  }
  if (!result) {
    if (!ex.body_done()) ex.CloseAfterResponse();
    co_await SendError(c, result.error());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_->Record(c.op, seconds, !result.has_value());
}

void S3Handler::SetCredentials(std::map<std::string, std::string> credentials) {
  auto fresh = std::make_shared<const Credentials>(std::move(credentials));
  std::lock_guard lock(credentials_mu_);
  credentials_ = std::move(fresh);
}

asio::awaitable<S3Result<S3Handler::BucketInfo>> S3Handler::FindBucket(const std::string& bucket) {
  if (!ValidBucketName(bucket)) {
    co_return Fail("NoSuchBucket", "The specified bucket does not exist");
  }
  {
    std::lock_guard lock(bucket_cache_mu_);
    auto it = bucket_cache_.find(bucket);
    if (it != bucket_cache_.end() && std::chrono::steady_clock::now() < it->second.expires) {
      co_return it->second.info;
    }
  }
  const std::string key = std::string(kBucketPrefix) + bucket;
  Result<std::string> meta = co_await Blocking([&] { return ReadWholeObject(*store_, key); });
  if (!meta) {
    if (meta.error().code() == StatusCode::kNotFound) {
      if (options_.bucket_elsewhere &&
          co_await Blocking([&] { return options_.bucket_elsewhere(bucket); })) {
        co_return Fail("AccessDenied", "Access Denied");
      }
      co_return Fail("NoSuchBucket", "The specified bucket does not exist");
    }
    co_return std::unexpected(FromStatus(meta.error()));
  }
  nlohmann::json j = nlohmann::json::parse(*meta, nullptr, false);
  BucketInfo info;
  if (j.is_object()) {
    if (auto c = j.find("created"); c != j.end() && c->is_number_integer()) {
      info.created = c->get<int64_t>();
    }
    if (auto it = j.find("layout"); it != j.end() && it->is_object()) {
      Result<ModelPreset> m = ParseModelJson(it->dump());
      if (m) info.layout = *m;
    }
  }
  std::lock_guard lock(bucket_cache_mu_);
  if (bucket_cache_.size() > 10000) bucket_cache_.clear();
  bucket_cache_[bucket] = {info, std::chrono::steady_clock::now() + kBucketCacheTtl};
  co_return info;
}

void S3Handler::ForgetBucket(const std::string& bucket) {
  std::lock_guard lock(bucket_cache_mu_);
  bucket_cache_.erase(bucket);
}

asio::awaitable<S3Result<void>> S3Handler::Dispatch(Ctx& c) {
  S3Request& r = c.req;
  // The operational endpoints, to unsigned requests (a signed one is an ordinary request for a
  // bucket of that name); /metrics only when it has no port of its own (metrics_handler.h).
  if (!IsSigned(r) && !r.virtual_host) {
    const std::optional<OperationalEndpoint> e = FindOperationalEndpoint(r.method, r.raw_path);
    if (e && (*e != OperationalEndpoint::kMetrics || options_.serve_metrics)) {
      co_await ServeOperationalEndpoint(*e, c.ex, *store_, *metrics_, pool_);
      co_return S3Result<void>();
    }
  }
  std::shared_ptr<const Credentials> credentials;
  {
    std::lock_guard lock(credentials_mu_);
    credentials = credentials_;
  }
  if (IsSigned(r) && !(options_.anonymous && credentials->empty())) {
    const SecretLookup secrets = [&credentials](std::string_view ak) -> const std::string* {
      auto it = credentials->find(std::string(ak));
      return it == credentials->end() ? nullptr : &it->second;
    };
    const bool v2 = IsSigV2(r);
    if (v2 && !options_.sigv2) {
      co_return Fail("AccessDenied", "Signature Version 2 is disabled here (--no-sigv2)");
    }
    auto id = v2 ? VerifySigV2(r, secrets, std::time(nullptr))
                 : VerifySigV4(r, secrets, std::time(nullptr), options_.region);
    if (!id) co_return std::unexpected(id.error());
    c.id = std::move(*id);
  } else if (!options_.anonymous) {
    co_return Fail("AccessDenied", "Anonymous requests are not accepted: sign with SigV4");
  }

  auto route = RouteS3Request(r);
  if (!route) co_return std::unexpected(route.error());
  // A SigV2 signature does not cover the extensions' sub-resources (they are not in its
  // canonical resource): a signed lookup could be replayed as a batch store.
  const bool extension = *route == S3Route::kGetKvLayout || *route == S3Route::kBatchLookup ||
                         *route == S3Route::kPin || *route == S3Route::kLayerwiseRetrieve ||
                         *route == S3Route::kBatchStore;
  if (extension && c.id && c.id->signature_version == 2) {
    co_return Fail("AccessDenied", "the objectcache extensions need Signature Version 4");
  }
  if (!r.key.empty()) {
    if (r.key.size() > kMaxS3KeyBytes) {
      co_return Fail("KeyTooLongError", "Your key is too long (at most 1024 bytes)");
    }
    if (!IsValidUtf8(r.key)) co_return Fail("InvalidArgument", "object names must be valid UTF-8");
    // One version of each object, whose id is "null" (docs/s3-api.md, "Versions").
    if (const std::string* v = r.Query("versionId"); v && *v != "null") {
      co_return Fail("NoSuchVersion", "The specified version does not exist.");
    }
  }
  c.op = MetricOperation(*route);
  // Every operation but these two acts on a bucket that exists: found once, here.
  if (*route != S3Route::kListBuckets && *route != S3Route::kCreateBucket) {
    S3Result<BucketInfo> bucket = co_await FindBucket(r.bucket);
    if (!bucket) co_return std::unexpected(bucket.error());
    c.bucket = std::move(*bucket);
  }
  switch (*route) {
    case S3Route::kListBuckets:
      co_return co_await ListBuckets(c);
    case S3Route::kCreateBucket:
      co_return co_await CreateBucket(c);
    case S3Route::kDeleteBucket:
      co_return co_await DeleteBucket(c);
    case S3Route::kHeadBucket: {
      Headers h{{"x-amz-request-id", c.request_id}};
      (void)co_await c.ex.RespondHeaderOnly(200, std::move(h), 0);
      co_return S3Result<void>();
    }
    case S3Route::kListObjects:
      co_return co_await ListObjects(c, false);
    case S3Route::kListObjectsV2:
      co_return co_await ListObjects(c, true);
    case S3Route::kListObjectVersions:
      co_return co_await ListObjectVersions(c);
    case S3Route::kGetBucketLocation: {
      XmlWriter w;
      w.Open("LocationConstraint", true);
      w.Close("LocationConstraint");
      co_await SendXml(c, 200, w.Finish());
      co_return S3Result<void>();
    }
    case S3Route::kGetBucketVersioning:
    case S3Route::kPutBucketVersioning:
      co_return co_await BucketVersioning(c, *route == S3Route::kPutBucketVersioning);
    case S3Route::kGetBucketAcl:
    case S3Route::kGetObjectAcl:
      co_return co_await GetAcl(c);
    case S3Route::kPutBucketAcl:
    case S3Route::kPutObjectAcl:
      co_return co_await PutAcl(c);
    case S3Route::kListMultipartUploads:
      co_return co_await ListUploads(c);
    case S3Route::kDeleteObjects:
      co_return co_await DeleteObjects(c);
    case S3Route::kGetKvLayout: {
      if (!c.bucket.layout) co_return Fail("NoSuchKey", "bucket is not bound to a KV layout");
      Headers h{{"Content-Type", "application/json"}};
      (void)co_await c.ex.Respond(200, std::move(h), ModelToJson(*c.bucket.layout));
      co_return S3Result<void>();
    }
    case S3Route::kBatchLookup:
      co_return co_await BatchLookup(c);
    case S3Route::kPin:
      co_return co_await PinKeys(c);
    case S3Route::kLayerwiseRetrieve:
      co_return co_await LayerwiseRetrieve(c);
    case S3Route::kBatchStore:
      co_return co_await BatchStore(c);
    case S3Route::kPutObject:
      co_return co_await PutObject(c);
    case S3Route::kCopyObject:
      co_return co_await CopyObject(c);
    case S3Route::kGetObject:
      co_return co_await GetObject(c, false);
    case S3Route::kHeadObject:
      co_return co_await GetObject(c, true);
    case S3Route::kGetObjectAttributes:
      co_return co_await GetObjectAttributes(c);
    case S3Route::kDeleteObject:
      co_return co_await DeleteObject(c);
    case S3Route::kCreateMultipartUpload:
      co_return co_await CreateMultipart(c);
    case S3Route::kUploadPart:
      co_return co_await UploadPart(c);
    case S3Route::kListParts:
      co_return co_await ListParts(c);
    case S3Route::kCompleteMultipartUpload:
      co_return co_await CompleteMultipart(c);
    case S3Route::kAbortMultipartUpload:
      co_return co_await AbortMultipart(c);
  }
  co_return Fail("MethodNotAllowed", "The specified method is not allowed against this resource");
}

// ---- buckets -------------------------------------------------------------------------------

void WriteOwner(XmlWriter* w, std::string_view element) {
  w->Open(element);
  w->Element("ID", kOwnerId);
  w->Element("DisplayName", kOwnerId);
  w->Close(element);
}

asio::awaitable<S3Result<void>> S3Handler::ListBuckets(Ctx& c) {
  const S3Request& r = c.req;
  // Every bucket unless max-buckets asks for pages (1 to 10000, as S3 takes it).
  std::optional<uint64_t> max_buckets;
  if (r.Query("max-buckets")) {
    auto n = QueryNumber(r, "max-buckets", 0, UINT64_MAX);
    if (!n) co_return std::unexpected(n.error());
    if (*n < 1 || *n > 10000) co_return Fail("InvalidArgument", "max-buckets must be 1 to 10000");
    max_buckets = *n;
  }
  const std::string prefix = r.Query("prefix") ? *r.Query("prefix") : std::string();
  std::string after;
  if (const std::string* token = r.Query("continuation-token")) {
    if (!Base64Decode(*token, &after) || after.empty()) {
      co_return Fail("InvalidArgument", "The continuation token provided is incorrect");
    }
  }
  // All buckets are in this server's region: another region has none.
  const std::string* region = r.Query("bucket-region");
  const bool other_region = region != nullptr && *region != options_.region;
  struct Bucket {
    std::string name;
    int64_t created = 0;
  };
  struct Page {
    std::vector<Bucket> buckets;
    bool truncated = false;
  };
  auto page = co_await Blocking([&]() -> Result<Page> {
    Page out;
    if (other_region) return out;
    const size_t want = max_buckets.value_or(SIZE_MAX - 1);
    std::string start = after.empty() ? std::string() : std::string(kBucketPrefix) + after;
    for (;;) {
      OC_ASSIGN_OR_RETURN(ListPage names,
                          store_->List({.prefix = std::string(kBucketPrefix) + prefix,
                                        .start_after = start,
                                        .max_keys = std::min<size_t>(want + 1, 1000)}));
      for (const ObjectInfo& info : names.objects) {
        start = info.key;
        Result<std::string> meta = ReadWholeObject(*store_, info.key);
        if (!meta) continue;  // deleted meanwhile
        if (out.buckets.size() == want) {
          out.truncated = true;
          return out;
        }
        nlohmann::json j = nlohmann::json::parse(*meta, nullptr, false);
        out.buckets.push_back(
            {info.key.substr(kBucketPrefix.size()),
             j.is_object() && j["created"].is_number_integer() ? j["created"].get<int64_t>() : 0});
      }
      if (!names.truncated) return out;
    }
  });
  if (!page) co_return std::unexpected(FromStatus(page.error()));
  XmlWriter w;
  w.Open("ListAllMyBucketsResult", true);
  WriteOwner(&w);
  w.Open("Buckets");
  for (const Bucket& b : page->buckets) {
    w.Open("Bucket");
    w.Element("Name", b.name);
    w.Element("CreationDate", IsoTime(b.created));
    w.Element("BucketRegion", options_.region);
    w.Close("Bucket");
  }
  w.Close("Buckets");
  if (page->truncated) w.Element("ContinuationToken", Base64Encode(page->buckets.back().name));
  if (r.Query("prefix")) w.Element("Prefix", prefix);
  w.Close("ListAllMyBucketsResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::CreateBucket(Ctx& c) {
  const std::string& bucket = c.req.bucket;
  if (!ValidNewBucketName(bucket)) {
    co_return Fail("InvalidBucketName",
                   "The specified bucket is not valid: 3-63 characters of a-z, 0-9, '.' and "
                   "'-', beginning and ending with a letter or digit, no '..', '.-' or '-.', "
                   "not an IP address, no prefix xn-- or sthree-, no suffix -s3alias or --ol-s3");
  }
  // The body may carry a CreateBucketConfiguration; any region is accepted.
  auto body = co_await ReadSmallBody(c, 64 << 10);
  if (!body) co_return std::unexpected(body.error());
  if (!body->empty()) {
    XmlElement root;
    std::string why;
    if (!ParseXml(*body, &root, &why)) co_return Fail("MalformedXML", why);
  }
  nlohmann::json meta;
  meta["created"] = static_cast<int64_t>(std::time(nullptr));
  if (const std::string* layout = c.req.Header("x-objectcache-kv-layout")) {
    Result<ModelPreset> model =
        layout->starts_with("{") ? ParseModelJson(*layout) : FindModelPreset(*layout);
    if (!model)
      co_return Fail("InvalidArgument", "x-objectcache-kv-layout: " + model.error().message());
    meta["layout"] = nlohmann::json::parse(ModelToJson(*model));
  }
  if (options_.bucket_elsewhere &&
      co_await Blocking([&] { return options_.bucket_elsewhere(bucket); })) {
    co_return Fail("BucketAlreadyExists",
                   "The requested bucket name is not available. The bucket namespace is shared "
                   "by all tenants of this server.");
  }
  const std::string key = std::string(kBucketPrefix) + bucket;
  Status s = co_await Blocking([&]() -> Status {
    const std::string text = meta.dump();
    // Created only if absent, atomically, so that of two racing creates (with different
    // layouts, say) exactly one wins. A store without conditional puts (s3://) gets the check
    // and the write under this gateway's lock: safe for one gateway only (docs/s3-api.md).
    if (store_->Capabilities().conditional_put) {
      return store_->Put(key, AsBytes(text), {.if_absent = true});
    }
    std::lock_guard lock(bucket_create_mu_);
    if (store_->Stat(key).has_value()) return AlreadyExistsError("bucket exists");
    return store_->Put(key, AsBytes(text));
  });
  if (s.code() == StatusCode::kAlreadyExists) {
    co_return Fail(
        "BucketAlreadyOwnedByYou",
        "Your previous request to create the named bucket succeeded and you already own it.");
  }
  if (!s.ok()) co_return std::unexpected(FromStatus(s));
  {
    Headers h{{"Location", "/" + bucket}, {"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(200, std::move(h), "");
  }
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::DeleteBucket(Ctx& c) {
  Status s = co_await Blocking([&]() -> Status {
    OC_ASSIGN_OR_RETURN(
        ListPage page,
        store_->List({.prefix = c.req.bucket + "/", .start_after = "", .max_keys = 1}));
    if (!page.objects.empty()) return FailedPreconditionError("not empty");
    // Unfinished multipart uploads go with the bucket (docs/s3-api.md): none is left orphaned.
    OC_RETURN_IF_ERROR(RemoveBucketUploads(c.req.bucket));
    return store_->Delete(std::string(kBucketPrefix) + c.req.bucket);
  });
  ForgetBucket(c.req.bucket);
  if (s.code() == StatusCode::kFailedPrecondition) {
    co_return Fail("BucketNotEmpty", "The bucket you tried to delete is not empty");
  }
  if (!s.ok() && s.code() != StatusCode::kNotFound) co_return std::unexpected(FromStatus(s));
  {
    Headers h{{"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(204, std::move(h), "");
  }
  co_return S3Result<void>();
}

void WriteCommonPrefixes(XmlWriter* w, const std::vector<std::string>& prefixes, bool url_encoded) {
  for (const std::string& p : prefixes) {
    w->Open("CommonPrefixes");
    w->Element("Prefix", ListingName(p, url_encoded));
    w->Close("CommonPrefixes");
  }
}

Result<S3Handler::Listing> S3Handler::ListBucket(const std::string& bucket,
                                                 const std::string& prefix,
                                                 const std::string& delimiter,
                                                 const std::string& position, size_t max_keys) {
  const std::string base = bucket + "/";
  Listing out;
  if (max_keys == 0) return out;  // nothing asked for, nothing truncated (as S3 answers)
  std::string after = position;
  // With a delimiter, every common prefix restarts the store listing past it, so the store is
  // asked for small pages first (a page costs the store about max_keys names per index shard),
  // doubling while no prefix cuts them short.
  size_t page_keys = delimiter.empty() ? SIZE_MAX : 16;
  for (;;) {
    const size_t want = max_keys - out.objects.size() - out.prefixes.size();
    ListOptions o{.prefix = base + prefix,
                  .start_after = after.empty() ? std::string() : base + after,
                  .max_keys = std::min(want + 1, page_keys)};
    OC_ASSIGN_OR_RETURN(ListPage page, store_->List(o));
    bool restart = false;
    for (const ObjectInfo& info : page.objects) {
      if (out.objects.size() + out.prefixes.size() == max_keys) {
        out.truncated = true;  // at least one more name follows
        return out;
      }
      std::string name = info.key.substr(base.size());
      if (!delimiter.empty()) {
        size_t d = name.find(delimiter, prefix.size());
        if (d != std::string::npos) {
          std::string cp = name.substr(0, d + delimiter.size());
          // A prefix at or before the resume point was returned by an earlier page.
          if (position.empty() || cp > position) {
            out.prefixes.push_back(cp);
            out.last = cp;
          }
          after = cp + "\xff";  // past every name under this prefix (UTF-8 has no 0xff)
          restart = true;
          break;
        }
      }
      std::string etag;
      int64_t mtime = 0;
      if (Result<std::unique_ptr<ObjectReader>> rd = store_->OpenReader(info.key)) {
        if (auto a = ObjectAttributes::Decode((*rd)->attributes())) etag = a->etag;
        mtime = (*rd)->mtime();
      } else {
        continue;  // deleted meanwhile
      }
      out.objects.push_back({name, info.size, etag, mtime});
      out.last = name;
      after = name;
    }
    if (restart) continue;
    if (!page.truncated) break;
    if (page_keys < SIZE_MAX / 2) page_keys *= 2;
  }
  return out;
}

asio::awaitable<S3Result<void>> S3Handler::ListObjects(Ctx& c, bool v2) {
  const S3Request& r = c.req;
  auto q = [&r](const char* name) {
    const std::string* v = r.Query(name);
    return v ? *v : std::string();
  };
  const std::string prefix = q("prefix"), delimiter = q("delimiter");
  auto url_encoded = QueryUrlEncoding(r);
  if (!url_encoded) co_return std::unexpected(url_encoded.error());
  const bool url = *url_encoded;
  // ListObjects (v1) always names each object's owner; v2 when asked to.
  const bool owner = !v2 || q("fetch-owner") == "true";
  auto max_keys = QueryNumber(r, "max-keys", 1000, 1000);
  if (!max_keys) co_return std::unexpected(max_keys.error());
  std::string position;  // list names strictly after this
  if (v2) {
    if (const std::string* token = r.Query("continuation-token")) {
      if (!Base64Decode(*token, &position)) {
        co_return Fail("InvalidArgument", "The continuation token provided is incorrect");
      }
    } else {
      position = q("start-after");
    }
  } else {
    position = q("marker");
  }
  auto listing = co_await Blocking(
      [&] { return ListBucket(r.bucket, prefix, delimiter, position, *max_keys); });
  if (!listing) co_return std::unexpected(FromStatus(listing.error()));
  XmlWriter w;
  w.Open("ListBucketResult", true);
  w.Element("Name", r.bucket);
  w.Element("Prefix", ListingName(prefix, url));
  if (!delimiter.empty()) w.Element("Delimiter", ListingName(delimiter, url));
  w.Element("MaxKeys", std::to_string(*max_keys));
  if (url) w.Element("EncodingType", "url");
  w.Element("IsTruncated", listing->truncated ? "true" : "false");
  if (v2) {
    w.Element("KeyCount", std::to_string(listing->objects.size() + listing->prefixes.size()));
    if (const std::string* t = r.Query("continuation-token")) w.Element("ContinuationToken", *t);
    if (r.Query("start-after")) w.Element("StartAfter", ListingName(q("start-after"), url));
    if (listing->truncated) w.Element("NextContinuationToken", Base64Encode(listing->last));
  } else {
    w.Element("Marker", ListingName(position, url));
    if (listing->truncated && !delimiter.empty()) {
      w.Element("NextMarker", ListingName(listing->last, url));
    }
  }
  for (const Listing::Object& o : listing->objects) {
    w.Open("Contents");
    w.Element("Key", ListingName(o.key, url));
    w.Element("LastModified", IsoTime(o.mtime));
    w.Element("ETag", "\"" + o.etag + "\"");
    w.Element("Size", std::to_string(o.size));
    if (owner) WriteOwner(&w);
    w.Element("StorageClass", "STANDARD");
    w.Close("Contents");
  }
  WriteCommonPrefixes(&w, listing->prefixes, url);
  w.Close("ListBucketResult");
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
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
  co_await SendXml(c, 200, w.Finish());
  co_return S3Result<void>();
}

S3Result<std::vector<std::string>> S3Handler::BodyKeys(const Ctx& c, const nlohmann::json& j,
                                                       std::string_view what) const {
  if (j.is_discarded() || !j.is_object() || !j.contains("keys") || !j["keys"].is_array()) {
    return Fail("InvalidArgument",
                std::string(what) + " body must be {\"keys\": [\"key\", ...], ...}");
  }
  const nlohmann::json& list = j["keys"];
  if (list.size() > options_.max_lookup_keys) {
    return Fail("InvalidArgument", std::string(what) + " takes at most " +
                                       std::to_string(options_.max_lookup_keys) + " keys");
  }
  std::vector<std::string> keys;
  keys.reserve(list.size());
  for (const auto& k : list) {
    if (!k.is_string() || k.get<std::string>().empty() ||
        k.get<std::string>().size() > kMaxS3KeyBytes) {
      return Fail("InvalidArgument",
                  std::string(what) + " keys must be non-empty strings of at most 1024 bytes");
    }
    // A KV bucket holds chunk objects only, under their keys: any other name is a mistake.
    if (c.bucket.layout && !ChunkKey::FromHex(k.get<std::string>()).has_value()) {
      return Fail("InvalidArgument", std::string(what) +
                                         " keys in a KV-layout bucket are chunk keys (32 hex "
                                         "digits), not '" +
                                         k.get<std::string>().substr(0, 64) + "'");
    }
    keys.push_back(ObjectKey(c.req.bucket, k.get<std::string>()));
  }
  return keys;
}

asio::awaitable<S3Result<void>> S3Handler::BatchLookup(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 16 + options_.max_lookup_keys * 1100);
  if (!body) co_return std::unexpected(body.error());
  StoreNames names;
  const std::string* type = c.req.Header("content-type");
  if (type && *type == wire::kChunkKeysContentType) {
    // The binary body: chunk keys, 16 bytes each (src/wire/lookup_wire.h).
    Result<std::vector<ChunkKey>> chunk_keys =
        wire::ParseChunkKeys(AsBytes(*body), options_.max_lookup_keys);
    if (!chunk_keys) co_return Fail("InvalidArgument", chunk_keys.error().message());
    names = ChunkObjectKeyViews(c.req.bucket, *chunk_keys);
  } else {
    const nlohmann::json j =
        wire::ParseBoundedJson(*body, {.max_values = options_.max_lookup_keys + 16});
    S3Result<std::vector<std::string>> parsed = BodyKeys(c, j, "lookup");
    if (!parsed) co_return std::unexpected(parsed.error());
    names.owned = std::move(*parsed);
    names.views.assign(names.owned.begin(), names.owned.end());
  }
  const std::span<const std::string_view> keys = names.views;
  auto present = co_await Blocking([&] { return store_->Exist(keys); });
  if (!present) co_return std::unexpected(FromStatus(present.error()));
  size_t prefix = 0;
  while (prefix < present->size() && (*present)[prefix]) ++prefix;
  std::string bitmap((keys.size() + 7) / 8, '\0');
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*present)[i]) bitmap[i / 8] = static_cast<char>(bitmap[i / 8] | (1 << (i % 8)));
  }
  nlohmann::json out;
  out["count"] = keys.size();
  out["present_prefix"] = prefix;
  out["present"] = static_cast<size_t>(std::count(present->begin(), present->end(), true));
  out["bitmap"] = Base64Encode(bitmap);
  {
    Headers h{{"Content-Type", "application/json"}, {"x-amz-request-id", c.request_id}};
    (void)co_await c.ex.Respond(200, std::move(h), out.dump());
  }
  metrics_->store_hits += prefix;
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::PinKeys(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 64 + options_.max_lookup_keys * 1100);
  if (!body) co_return std::unexpected(body.error());
  const nlohmann::json j =
      wire::ParseBoundedJson(*body, {.max_values = options_.max_lookup_keys + 16});
  S3Result<std::vector<std::string>> keys = BodyKeys(c, j, "pin");
  if (!keys) co_return std::unexpected(keys.error());
  const auto ttl = j.find("ttl_seconds");
  if (ttl == j.end() || !ttl->is_number_unsigned() || ttl->get<uint64_t>() == 0 ||
      ttl->get<uint64_t>() > kMaxPinSeconds) {
    co_return Fail("InvalidArgument",
                   "pin needs \"ttl_seconds\": 1 to " + std::to_string(kMaxPinSeconds));
  }
  const int64_t until = options_.now() + static_cast<int64_t>(ttl->get<uint64_t>());
  std::vector<Status> results = co_await Blocking([&] {
    std::vector<Status> out;
    out.reserve(keys->size());
    for (const std::string& key : *keys) out.push_back(store_->Pin(key, until));
    return out;
  });
  nlohmann::json missing = nlohmann::json::array();
  size_t pinned = 0;
  const size_t name_from = c.req.bucket.size() + 1;  // the S3 key within the store name
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) {
      pinned++;
    } else if (results[i].code() == StatusCode::kNotFound) {
      missing.push_back((*keys)[i].substr(name_from));
    } else {
      co_return std::unexpected(FromStatus(results[i]));
    }
  }
  nlohmann::json out;
  out["pinned"] = pinned;
  out["until"] = until;
  out["missing"] = std::move(missing);
  Headers h{{"Content-Type", "application/json"}, {"x-amz-request-id", c.request_id}};
  (void)co_await c.ex.Respond(200, std::move(h), out.dump());
  co_return S3Result<void>();
}

// ---- request bodies ------------------------------------------------------------------------

S3Result<uint64_t> QueryNumber(const S3Request& r, const char* name, uint64_t fallback,
                               uint64_t max) {
  const std::string* v = r.Query(name);
  if (v == nullptr) return fallback;
  uint64_t n = 0;
  if (!ParseDecimal(*v, &n)) {
    return Fail("InvalidArgument", std::string(name) + " must be a non-negative integer");
  }
  return std::min(n, max);
}

S3Result<bool> QueryUrlEncoding(const S3Request& r) {
  const std::string* v = r.Query("encoding-type");
  if (v == nullptr) return false;
  if (*v != "url") return Fail("InvalidArgument", "Invalid Encoding Method specified in Request");
  return true;
}

S3Result<S3Handler::WriteCondition> S3Handler::ParseWriteCondition(const S3Request& r) const {
  const std::string* match = r.Header("if-match");
  const std::string* none_match = r.Header("if-none-match");
  if (match == nullptr && none_match == nullptr) return WriteCondition{};
  if (match != nullptr && none_match != nullptr) {
    return Fail("InvalidRequest", "a write takes If-Match or If-None-Match, not both");
  }
  if (none_match != nullptr && *none_match != "*") {
    return Fail("NotImplemented", "If-None-Match on a write takes only *");
  }
  if (match != nullptr && match->empty()) return Fail("InvalidArgument", "If-Match is empty");
  if (!store_->Capabilities().conditional_put) {
    return Fail("NotImplemented", "this server's store has no conditional puts");
  }
  if (match != nullptr) return WriteCondition{.if_match = *match};
  return WriteCondition{.create_only = true};
}

S3Result<S3Handler::ObjectVersion> S3Handler::OpenObjectVersion(const std::string& store_key) {
  Result<std::unique_ptr<ObjectReader>> reader = store_->OpenReader(store_key);
  if (!reader) {
    if (reader.error().code() == StatusCode::kNotFound) {
      return Fail("NoSuchKey", "The specified key does not exist.");
    }
    return std::unexpected(FromStatus(reader.error()));
  }
  std::optional<ObjectAttributes> attributes = ObjectAttributes::Decode((*reader)->attributes());
  if (!attributes) return Fail("InternalError", "object metadata is damaged");
  return ObjectVersion{std::move(*reader), std::move(*attributes)};
}

S3Result<PutOptions> S3Handler::ConditionalPutOptions(const WriteCondition& condition,
                                                      const std::string& store_key) {
  if (!condition.if_match) return PutOptions{.if_absent = condition.create_only};
  S3Result<ObjectVersion> current = OpenObjectVersion(store_key);
  if (!current) return std::unexpected(current.error());
  if (!EtagListMatches(*condition.if_match, current->attributes.etag)) return PreconditionFailed();
  return PutOptions{.if_attributes = current->reader->attributes()};
}

S3Error CommitFailure(const Status& s, const PutOptions& condition) {
  if (s.code() == StatusCode::kAlreadyExists && condition.if_absent) {
    return PreconditionFailed().error();
  }
  if ((s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kNotFound) &&
      condition.if_attributes) {
    return ConditionalRequestConflict().error();
  }
  return FromStatus(s);
}

S3Result<void> S3Handler::DeleteObjectIf(const std::string& store_key,
                                         const DeleteConditions& conditions) {
  if (!conditions.any()) {
    Status s = store_->Delete(store_key);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return std::unexpected(FromStatus(s));
    return S3Result<void>();
  }
  if (!store_->Capabilities().conditional_put) {
    return Fail("NotImplemented", "this server's store has no conditional deletes");
  }
  // S3: an absent object is NoSuchKey under If-Match, deleted already under the others.
  auto absent = [&]() -> S3Result<void> {
    if (conditions.if_match) return Fail("NoSuchKey", "The specified key does not exist.");
    return S3Result<void>();
  };
  S3Result<ObjectVersion> current = OpenObjectVersion(store_key);
  if (!current) {
    if (current.error().code == "NoSuchKey") return absent();
    return std::unexpected(current.error());
  }
  const ObjectReader& version = *current->reader;
  if (!DeleteConditionsHold(conditions, current->attributes.etag, version.mtime(),
                            version.size())) {
    return PreconditionFailed();
  }
  // Removed only if still the version checked, else 409: a writer replaced it meanwhile.
  Status s = store_->DeleteIf(store_key, version.attributes());
  if (s.code() == StatusCode::kNotFound) return absent();
  if (s.code() == StatusCode::kFailedPrecondition) return ConditionalRequestConflict();
  if (!s.ok()) return std::unexpected(FromStatus(s));
  return S3Result<void>();
}

asio::awaitable<S3Result<std::string>> S3Handler::ReadSmallBody(Ctx& c, size_t limit) {
  std::optional<uint64_t> len = c.ex.ContentLength();
  if (len && *len > limit) co_return Fail("EntityTooLarge", "request body is too large");
  // The buffer grows as bytes arrive, never to a declared length ahead of them, and within the
  // request memory budget.
  MemoryBudget::Lease lease = memory_.NewLease();
  std::string body;
  size_t got = 0;
  for (;;) {
    if (got == body.size()) {
      if (c.ex.body_done()) break;
      if (body.size() >= limit) co_return Fail("EntityTooLarge", "request body is too large");
      const size_t next = std::min(limit, std::max<size_t>(body.size() * 2, 4096));
      if (!lease.GrowTo(next)) co_return MemoryBudgetExhausted();
      body.resize(next);
    }
    Result<size_t> n = co_await c.ex.ReadBody(AsWritableBytes(body).subspan(got));
    if (!n) co_return Fail("IncompleteBody", n.error().message());
    if (*n == 0) break;
    got += *n;
  }
  body.resize(got);
  if (c.id && c.id->payload_hash != kUnsignedPayload && ToHex(Sha256(body)) != c.id->payload_hash) {
    co_return Fail("XAmzContentSHA256Mismatch",
                   "The provided 'x-amz-content-sha256' header does not match what was computed.");
  }
  if (const std::string* md5 = c.req.Header("content-md5")) {
    std::string want;
    if (!Base64Decode(*md5, &want) || want.size() != 16) {
      co_return Fail("InvalidDigest", "The Content-MD5 you specified was invalid.");
    }
    if (Md5(body) != want) {
      co_return Fail("BadDigest", "The Content-MD5 you specified did not match what we received.");
    }
  }
  co_return body;
}

asio::awaitable<S3Result<std::string>> S3Handler::ReceiveBody(Ctx& c, const std::string& store_key,
                                                              ObjectAttributes attributes,
                                                              const std::optional<ModelPreset>& kv,
                                                              const PutOptions& condition) {
  const S3Request& r = c.req;
  const std::string payload_hash =
      c.id ? c.id->payload_hash
           : (r.Header("x-amz-content-sha256") ? *r.Header("x-amz-content-sha256")
                                               : std::string(kUnsignedPayload));
  const bool streaming = payload_hash.starts_with("STREAMING-");
  std::optional<AwsChunkedDecoder> chunked;
  uint64_t expected_length = 0;
  if (streaming) {
    const std::string* decoded = r.Header("x-amz-decoded-content-length");
    if (decoded == nullptr) {
      co_return Fail("MissingContentLength", "x-amz-decoded-content-length is required");
    }
    if (!ParseDecimal(*decoded, &expected_length)) {
      co_return Fail("InvalidArgument", "x-amz-decoded-content-length must be a decimal number");
    }
    std::optional<PayloadChecksum> trailer;
    if (const std::string* t = r.Header("x-amz-trailer")) {
      std::string name = *t;
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      trailer = PayloadChecksum::ForHeader(name);
      if (!trailer) co_return Fail("InvalidArgument", "unsupported x-amz-trailer '" + *t + "'");
    }
    std::optional<ChunkSignatureChain> chain;
    if (payload_hash == kStreamingPayload) {
      if (!c.id) co_return Fail("AccessDenied", "signed streaming upload without a signature");
      chain.emplace(*c.id);
    } else if (payload_hash != "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
      co_return Fail("InvalidArgument", "unsupported x-amz-content-sha256 '" + payload_hash + "'");
    }
    chunked.emplace(std::move(chain), expected_length, std::move(trailer));
  } else {
    std::optional<uint64_t> len = c.ex.ContentLength();
    const std::string* te = r.Header("transfer-encoding");
    if (!len && te == nullptr) co_return Fail("MissingContentLength", "Content-Length is required");
    expected_length = len.value_or(0);
    if (payload_hash != kUnsignedPayload && payload_hash.size() != 64) {
      co_return Fail("InvalidArgument", "unsupported x-amz-content-sha256 '" + payload_hash + "'");
    }
  }
  // An x-amz-checksum-* header names a checksum of the whole payload: it is checked too.
  std::optional<PayloadChecksum> header_checksum;
  std::string header_checksum_value;
  for (const auto& [name, value] : r.headers) {
    if (!name.starts_with("x-amz-checksum-") || name == "x-amz-checksum-algorithm") continue;
    header_checksum = PayloadChecksum::ForHeader(name);
    if (!header_checksum) co_return Fail("InvalidArgument", "unsupported checksum " + name);
    header_checksum_value = value;
  }
  std::string content_md5;
  if (const std::string* md5 = r.Header("content-md5")) {
    if (!Base64Decode(*md5, &content_md5) || content_md5.size() != 16) {
      co_return Fail("InvalidDigest", "The Content-MD5 you specified was invalid.");
    }
  }
  std::optional<ChunkStreamVerifier> verifier;
  std::optional<ChunkKey> chunk_key;
  if (kv) {
    Result<ChunkKey> k = ChunkKey::FromHex(r.key);
    if (!k) {
      co_return Fail("InvalidChunkObject",
                     "objects in a KV bucket are named by their 32-hex-digit chunk key");
    }
    chunk_key = *k;
    verifier.emplace(ChunkExpectation{.layout = &kv->layout,
                                      .key = &*chunk_key,
                                      .object_bytes = streaming || c.ex.ContentLength()
                                                          ? std::optional(expected_length)
                                                          : std::nullopt});
  }
  if (attributes.UserMetadataBytes() > 2048) {
    co_return Fail("MetadataTooLarge",
                   "Your metadata headers exceed the maximum allowed size (2 KiB)");
  }
  auto writer = co_await Blocking([&] { return store_->NewWriter(store_key, condition); });
  if (!writer) co_return std::unexpected(FromStatus(writer.error()));

  Digest md5(Digest::Kind::kMd5);
  Digest sha(Digest::Kind::kSha256);
  const bool check_sha = !streaming && payload_hash != kUnsignedPayload;
  MemoryBudget::Lease lease = memory_.NewLease();
  if (!lease.GrowTo(options_.io_buffer_bytes)) co_return MemoryBudgetExhausted();
  IoBuffer raw(options_.io_buffer_bytes);
  std::string decoded;
  uint64_t total = 0;
  for (;;) {
    Result<size_t> n = co_await c.ex.ReadBody(raw.span());
    if (!n) {
      if (n.error().code() == StatusCode::kResourceExhausted) {
        co_return Fail("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size");
      }
      co_return Fail("IncompleteBody", n.error().message());
    }
    if (*n == 0) break;
    std::span<const std::byte> payload = std::span<const std::byte>(raw.span().first(*n));
    if (chunked) {
      decoded.clear();
      if (auto d = chunked->Feed(payload, &decoded); !d) co_return std::unexpected(d.error());
      payload = AsBytes(decoded);
    }
    if (payload.empty()) continue;
    md5.Update(payload);
    if (check_sha) sha.Update(payload);
    if (header_checksum) header_checksum->Update(payload);
    total += payload.size();
    if (verifier) {
      if (Status s = verifier->Feed(payload); !s.ok()) {
        co_return Fail("InvalidChunkObject", s.ToString());
      }
    }
    Status s = co_await Blocking([&] { return (*writer)->Append(payload); });
    if (!s.ok()) co_return std::unexpected(FromStatus(s));
  }
  if (chunked) {
    if (auto d = chunked->Finish(); !d) co_return std::unexpected(d.error());
  } else if (c.ex.ContentLength() && total != expected_length) {
    co_return Fail("IncompleteBody",
                   "You did not provide the number of bytes specified by the Content-Length");
  }
  if (check_sha && ToHex(sha.Finish()) != payload_hash) {
    co_return Fail("XAmzContentSHA256Mismatch",
                   "The provided 'x-amz-content-sha256' header does not match what was computed.");
  }
  if (header_checksum && header_checksum->FinishBase64() != header_checksum_value) {
    co_return Fail("BadDigest", "The " + header_checksum->header() +
                                    " you specified did not match the calculated checksum.");
  }
  const std::string digest = md5.Finish();
  if (!content_md5.empty() && digest != content_md5) {
    co_return Fail("BadDigest", "The Content-MD5 you specified did not match what we received.");
  }
  if (verifier) {
    if (Status s = verifier->Finish(); !s.ok()) co_return Fail("InvalidChunkObject", s.ToString());
  }
  attributes.etag = ToHex(digest);
  if (Status s = (*writer)->SetAttributes(attributes.Encode()); !s.ok()) {
    co_return Fail("MetadataTooLarge", s.message());
  }
  Status committed = co_await Blocking([&] { return (*writer)->Commit(); });
  if (!committed.ok()) co_return std::unexpected(CommitFailure(committed, condition));
  co_return ToHex(digest);
}

}  // namespace objectcache::server
