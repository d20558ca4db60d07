#include "server/s3_handler.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "s3/crypto.h"
#include "server/log.h"
#include "server/object_attributes.h"
#include "server/s3_body.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

TransportErrorResponse S3TransportErrorResponse(TransportFailure failure,
                                                const std::string& detail) {
  std::string code = "InvalidRequest";
  switch (failure) {
    case TransportFailure::kMalformedRequest:
      break;
    case TransportFailure::kHeaderTooLarge:
      code = "RequestHeaderSectionTooLarge";
      break;
    case TransportFailure::kBodyTooLarge:
      code = "EntityTooLarge";
      break;
    case TransportFailure::kOutOfDescriptors:
      code = "ServiceUnavailable";
      break;
  }
  const S3Error err = MakeS3Error(std::move(code), detail);
  return {.status = TransportFailureStatus(failure),
          .content_type = "application/xml",
          .body = err.ToXml("0")};
}

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

asio::awaitable<S3Result<void>> S3Handler::Reply(Ctx& c, unsigned status, Headers headers,
                                                 std::string body) {
  headers.emplace_back("x-amz-request-id", c.request_id);
  (void)co_await c.ex.Respond(status, std::move(headers), std::move(body));
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::ReplyXml(Ctx& c, std::string xml) {
  return Reply(c, 200, {{"Content-Type", "application/xml"}}, std::move(xml));
}

asio::awaitable<S3Result<void>> S3Handler::ReplyJson(Ctx& c, std::string json) {
  return Reply(c, 200, {{"Content-Type", "application/json"}}, std::move(json));
}

std::string S3Handler::AllowedMethods(const S3Request& r) {
  std::string allowed;
  S3Request other = r;
  for (const char* method : {"GET", "HEAD", "PUT", "POST", "DELETE"}) {
    other.method = method;
    if (S3Result<S3Route> route = RouteS3Request(other); route && FindOperation(*route))
      allowed += (allowed.empty() ? "" : ", ") + std::string(method);
  }
  return allowed;
}

asio::awaitable<void> S3Handler::SendError(Ctx& c, const S3Error& e) {
  S3Error err = e;
  if (err.resource.empty()) err.resource = c.req.raw_path;
  Headers h{{"Content-Type", "application/xml"}, {"x-amz-request-id", c.request_id}};
  const int status = err.HttpStatus();
  if (status == 405) h.emplace_back("Allow", AllowedMethods(c.req));
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
  Result<std::string> meta =
      co_await Blocking([&] { return ReadWholeObject(*store_, key, kMaxRecordBytes); });
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

asio::awaitable<S3Result<ObjectAttributes>> S3Handler::ReceiveBody(
    Ctx& c, const std::string& store_key, ObjectAttributes attributes,
    const std::optional<ModelPreset>& kv, const PutOptions& condition) {
  S3Result<std::unique_ptr<BodyPipeline>> body =
      BodyPipeline::ForRequest(c.req, c.id, c.ex.ContentLength(), kv);
  if (!body) co_return std::unexpected(body.error());
  if (attributes.UserMetadataBytes() > 2048) {
    co_return Fail("MetadataTooLarge",
                   "Your metadata headers exceed the maximum allowed size (2 KiB)");
  }
  auto writer = co_await Blocking([&] { return store_->NewWriter(store_key, condition); });
  if (!writer) co_return std::unexpected(FromStatus(writer.error()));

  MemoryBudget::Lease lease = memory_.NewLease();
  if (!lease.GrowTo(options_.io_buffer_bytes)) co_return MemoryBudgetExhausted();
  IoBuffer raw(options_.io_buffer_bytes);
  for (;;) {
    Result<size_t> n = co_await c.ex.ReadBody(raw.span());
    if (!n) {
      if (n.error().code() == StatusCode::kResourceExhausted) {
        co_return Fail("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size");
      }
      co_return Fail("IncompleteBody", n.error().message());
    }
    if (*n == 0) break;
    S3Result<std::span<const std::byte>> payload = (*body)->Feed(raw.span().first(*n));
    if (!payload) co_return std::unexpected(payload.error());
    if (payload->empty()) continue;
    Status s = co_await Blocking([&] { return (*writer)->Append(*payload); });
    if (!s.ok()) co_return std::unexpected(FromStatus(s));
  }
  S3Result<std::string> etag = (*body)->Finish();
  if (!etag) co_return std::unexpected(etag.error());
  attributes.etag = *etag;
  attributes.checksum = (*body)->checksum();
  if (Status s = (*writer)->SetAttributes(attributes.Encode()); !s.ok()) {
    co_return Fail("MetadataTooLarge", s.message());
  }
  Status committed = co_await Blocking([&] { return (*writer)->Commit(); });
  if (!committed.ok()) co_return std::unexpected(CommitFailure(committed, condition));
  co_return attributes;
}

asio::awaitable<S3Result<void>> S3Handler::ReplyStored(Ctx& c, const ObjectAttributes& stored) {
  Headers h{{"ETag", "\"" + stored.etag + "\""}};
  if (stored.checksum) h.push_back(*stored.checksum);
  co_return co_await Reply(c, 200, std::move(h));
}

}  // namespace objectcache::server
