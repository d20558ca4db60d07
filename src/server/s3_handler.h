// The S3 API over a Store: buckets, objects, listings, copies, multipart uploads, SigV4 auth,
// KV-layout buckets and the batch lookup extension (docs/s3-api.md).
//
// Store layout: object K of bucket B is the store object "B/K"; bucket B is described by the
// store object ".bucket/B" (creation time, KV layout); multipart upload U keeps ".mpu/U" (what
// it uploads) and ".mpu/U/NNNNN" (its parts). Bucket names never start with '.', so these
// cannot collide with objects. S3 object metadata (ETag, content type, user metadata) is the
// store object's attributes, so it changes atomically with the bytes.
//
// Every store call runs on the handler's blocking pool; the coroutine resumes on its worker.
// Bodies stream through fixed buffers: no request holds a whole object in memory.
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/hex.h"
#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/store.h"
#include "s3/s3_error.h"
#include "s3/s3_request.h"
#include "s3/sigv4.h"
#include "s3/xml.h"
#include "sched/bandwidth_scheduler.h"
#include "server/conditions.h"
#include "server/http_server.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/object_attributes.h"
#include "server/s3_routes.h"
#include "server/window_buffers.h"

namespace objectcache::server {

struct S3Options {
  // access key -> secret key (S3Handler::SetCredentials replaces them while serving)
  std::map<std::string, std::string> credentials;
  // Accept unsigned requests (and do not check signatures). For local development only.
  bool anonymous = false;
  // Hosts "<bucket>.<domain>" address buckets virtual-hosted style.
  std::vector<std::string> virtual_host_domains = {"localhost"};
  std::string region = "us-east-1";
  // Accept Signature Version 2 (s3/sigv2.h), as radosgw and MinIO do.
  bool sigv2 = true;
  unsigned blocking_threads = 8;
  size_t io_buffer_bytes = 1 << 20;  // per request, for streaming bodies
  size_t max_lookup_keys = 8192;
  // Memory held for all requests together: small bodies, upload buffers, layerwise windows
  // (memory_budget.h). A request that would pass it gets 503 SlowDown.
  uint64_t request_memory_bytes = 1ull << 30;
  // Objects this handler's (a tenant's) unfinished batch stores hold open together: each is a
  // file until its request commits. A request that would pass it gets 503 SlowDown; each tenant
  // has a budget of its own, so one tenant's batch stores never take another's.
  size_t max_open_batch_objects = 8192;
  // Unsigned GET /metrics on the S3 port; false when they have a port of their own.
  bool serve_metrics = true;
  // Multipart uploads: an unfinished one is removed with its parts after `upload_expiry`; a
  // bucket holds at most `max_uploads_per_bucket` at once.
  std::chrono::seconds upload_expiry{3 * 24 * 3600};
  size_t max_uploads_per_bucket = 1000;
  // Seconds since the epoch; injected so tests can move time.
  std::function<int64_t()> now = [] { return static_cast<int64_t>(std::time(nullptr)); };
  // Read-ahead per layerwise response read into memory (two windows in flight): whole layers of
  // every hit chunk when one fits, so that each chunk's consecutive layers are one read of its
  // object (layerwise.cc, WindowPlan). Also the largest layer slice a layout may have in a
  // layerwise request. 128 MiB: over RADOS, 512 KiB reads at 4K tokens of Llama-3.1-8B
  // (docs/ceph.md).
  size_t layerwise_window_bytes = 128 << 20;
  // One cap for all layerwise responses together (bytes/s), shared by `policy`
  // (docs/scheduler.md). Unlimited: no pacing.
  double bandwidth_cap = sched::kUnlimited;
  sched::Policy policy = sched::Policy::kComputeAware;
  // With tenants (tenants.h): true when another tenant owns a bucket of this name, which this
  // handler's callers then may neither create (409 BucketAlreadyExists) nor use (403
  // AccessDenied), as in S3's global bucket namespace. Blocking; unset: no other tenants.
  std::function<bool(const std::string& bucket)> bucket_elsewhere;
};

// Parses a layerwise request body (docs/wire-format.md) as LayerwiseRetrieve does, without a
// bucket: the S3 error it would answer, or OK. For tests and fuzzing.
s3::S3Result<void> CheckLayerwiseRequestBody(std::string_view body, size_t max_keys);

// Whether the page cache holds the first and the last byte of [first, last) of `obj`: the cheap
// sign that sending the range will not wait for a device.
inline bool InPageCache(const ObjectReader& obj, uint64_t first, uint64_t last) {
  std::byte probe[1];
  return obj.ReadAtIfCached(first, probe).ok() && obj.ReadAtIfCached(last - 1, probe).ok();
}

// A connection the HTTP server refuses itself, answered as S3 does: InvalidRequest,
// RequestHeaderSectionTooLarge or EntityTooLarge (400), ServiceUnavailable (503), in S3's XML.
TransportErrorResponse S3TransportErrorResponse(TransportFailure failure,
                                                const std::string& detail);

// S3's longest object name.
inline constexpr size_t kMaxS3KeyBytes = 1024;

// S3's rules for a bucket name that may be used: 3-63 lowercase letters, digits, '.' and '-',
// starting and ending with a letter or digit, no "..". A new bucket's name must also follow
// the rest of AWS's rules (s3_buckets.cc).
bool ValidBucketName(std::string_view b);

// `return Fail("NoSuchKey", "...")` from a function returning s3::S3Result<T>.
inline std::unexpected<s3::S3Error> Fail(std::string code, std::string message) {
  return std::unexpected(s3::MakeS3Error(std::move(code), std::move(message)));
}

// A whole write condition that did not hold (412).
inline std::unexpected<s3::S3Error> PreconditionFailed() {
  return Fail("PreconditionFailed",
              "At least one of the pre-conditions you specified did not hold");
}

// A conditional write or delete that lost a race after its condition was checked (409).
inline std::unexpected<s3::S3Error> ConditionalRequestConflict() {
  return Fail("ConditionalRequestConflict",
              "A conflicting operation occurred. Fetch the object's ETag and retry.");
}

// The S3 error for a commit under `condition` that failed with `s`: 412 when a create-only
// write found the name taken, 409 when the version an If-Match write read was replaced.
s3::S3Error CommitFailure(const Status& s, const PutOptions& condition);

// The optional decimal query parameter `name` (`fallback` when absent), capped at `max`;
// InvalidArgument when it is not a plain decimal number.
s3::S3Result<uint64_t> QueryNumber(const s3::S3Request& r, const char* name, uint64_t fallback,
                                   uint64_t max);

// encoding-type: true for "url", false when absent; InvalidArgument for any other value.
s3::S3Result<bool> QueryUrlEncoding(const s3::S3Request& r);

inline std::unexpected<s3::S3Error> MemoryBudgetExhausted() {
  return Fail("SlowDown", "the server's request memory budget is in use; retry later");
}

// A name as a listing writes it: URL-encoded for encoding-type=url.
inline std::string ListingName(std::string_view key, bool url_encoded) {
  return url_encoded ? s3::UriEncode(key, true) : std::string(key);
}

// <CommonPrefixes><Prefix>..</Prefix></CommonPrefixes> for each prefix, as a listing writes them.
void WriteCommonPrefixes(s3::XmlWriter* w, const std::vector<std::string>& prefixes,
                         bool url_encoded);

// The one owner of every bucket and object: an ACL's grantee, a listing's Owner.
inline constexpr std::string_view kOwnerId = "objectcache";
// <element><ID>objectcache</ID><DisplayName>objectcache</DisplayName></element>
void WriteOwner(s3::XmlWriter* w, std::string_view element = "Owner");

// The most a bucket or upload record is read as (one is a few hundred bytes; its largest part,
// stored headers, is bounded by the request header limit, at most 1 MiB): a store that reports
// a larger one is not believed.
inline constexpr uint64_t kMaxRecordBytes = 4 << 20;

// The store object describing bucket `bucket`, and the prefix of all of them.
inline constexpr std::string_view kBucketPrefix = ".bucket/";
inline std::string BucketObjectKey(std::string_view bucket) {
  return std::string(kBucketPrefix) + std::string(bucket);
}

// The store object holding object `key` of `bucket`.
inline std::string ObjectKey(const std::string& bucket, std::string_view key) {
  return bucket + "/" + std::string(key);
}

// The store object holding chunk object `key` of `bucket` (BUCKET/HEX), written at `out`,
// which has room for ChunkObjectKeyBytes(bucket); returns the end.
inline size_t ChunkObjectKeyBytes(const std::string& bucket) {
  return bucket.size() + 1 + 2 * sizeof(ChunkKey{}.bytes());
}
inline char* WriteChunkObjectKey(char* out, const std::string& bucket, const ChunkKey& key) {
  out = std::copy(bucket.begin(), bucket.end(), out);
  *out++ = '/';
  return EncodeHexTo(key.bytes().data(), key.bytes().size(), out);
}

// The store objects holding chunk objects `keys` of `bucket`, one string each.
inline std::vector<std::string> ChunkObjectKeys(const std::string& bucket,
                                                std::span<const ChunkKey> keys) {
  std::vector<std::string> names(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    names[i].resize(ChunkObjectKeyBytes(bucket));
    WriteChunkObjectKey(names[i].data(), bucket, keys[i]);
  }
  return names;
}

// The same names as views of one buffer: a lookup names thousands, and two allocations
// replace one a name.
struct StoreNames {
  std::string bytes;                    // the chunk names, back to back
  std::vector<std::string> owned;       // or names given one string each
  std::vector<std::string_view> views;  // the names, in order
};
inline StoreNames ChunkObjectKeyViews(const std::string& bucket, std::span<const ChunkKey> keys) {
  StoreNames out;
  const size_t each = ChunkObjectKeyBytes(bucket);
  out.bytes.resize(each * keys.size());
  out.views.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    char* at = out.bytes.data() + i * each;
    WriteChunkObjectKey(at, bucket, keys[i]);
    out.views.emplace_back(at, each);
  }
  return out;
}

class S3Handler final : public RequestHandler {
 public:
  S3Handler(Store* store, ServerMetrics* metrics, S3Options options);
  ~S3Handler() override;

  asio::awaitable<void> Handle(HttpExchange& exchange) override;
  TransportErrorResponse DescribeTransportFailure(TransportFailure failure,
                                                  const std::string& detail) const override {
    return S3TransportErrorResponse(failure, detail);
  }
  // Waits for the store calls running on the pool to end; the upload sweep stops.
  void Quiesce() override;
  // Handle, for a request already parsed with this handler's virtual-host domains (the tenant
  // router parses it to pick the handler). `parsed` must outlive the call.
  asio::awaitable<void> HandleParsed(HttpExchange& exchange, s3::S3Result<s3::S3Request>& parsed);

  // Replaces the credentials requests are checked against (a reload); requests in flight
  // finish with the ones they started with.
  void SetCredentials(std::map<std::string, std::string> credentials);

  // Bytes of the request memory budget in use: requests' leases and the layerwise windows kept
  // between responses (memory_budget.h).
  uint64_t request_memory_used() const { return memory_.used(); }

 private:
  using Credentials = std::map<std::string, std::string>;
  struct BucketInfo {
    int64_t created = 0;
    std::optional<ModelPreset> layout;
  };
  // The state of one request while it is handled.
  struct Ctx {
    HttpExchange& ex;
    s3::S3Request req;
    std::optional<s3::SigV4Identity> id;  // unset for anonymous requests
    std::string request_id;
    S3Op op = S3Op::kOther;
    // The request's bucket, found by Dispatch before any handler runs (every route but
    // ListBuckets and CreateBucket names an existing bucket).
    BucketInfo bucket;
  };

  // Authenticates, routes and runs the request's operation (s3_operations.cc).
  asio::awaitable<s3::S3Result<void>> Dispatch(Ctx& c);
  using OperationHandler = asio::awaitable<s3::S3Result<void>> (S3Handler::*)(Ctx&);
  struct Operation {
    S3Route route;
    S3Op metric;        // the label it is counted under
    bool needs_bucket;  // the bucket named must exist
    bool sigv2;         // Signature Version 2 may sign it
    OperationHandler run;
  };
  // The row of `route` (s3_operations.cc); nullptr for none.
  static const Operation* FindOperation(S3Route route);
  // The methods the resource `r` names takes, "GET, HEAD, ...": a 405's Allow (RFC 9110).
  static std::string AllowedMethods(const s3::S3Request& r);

  // The operations, one handler each. Buckets (s3_buckets.cc, s3_operations.cc).
  asio::awaitable<s3::S3Result<void>> ListBuckets(Ctx& c);
  asio::awaitable<s3::S3Result<void>> CreateBucket(Ctx& c);
  asio::awaitable<s3::S3Result<void>> DeleteBucket(Ctx& c);
  asio::awaitable<s3::S3Result<void>> HeadBucket(Ctx& c);
  asio::awaitable<s3::S3Result<void>> GetBucketLocation(Ctx& c);
  // Listings (s3_listings.cc).
  asio::awaitable<s3::S3Result<void>> ListObjectsV1(Ctx& c);
  asio::awaitable<s3::S3Result<void>> ListObjectsV2(Ctx& c);
  asio::awaitable<s3::S3Result<void>> ListObjects(Ctx& c, bool v2);
  // Versions, versioning and ACLs as an unversioned, single-owner cache answers them
  // (s3_versions_acl.cc).
  asio::awaitable<s3::S3Result<void>> ListObjectVersions(Ctx& c);
  asio::awaitable<s3::S3Result<void>> GetBucketVersioning(Ctx& c);
  asio::awaitable<s3::S3Result<void>> PutBucketVersioning(Ctx& c);
  asio::awaitable<s3::S3Result<void>> BucketVersioning(Ctx& c, bool put);
  asio::awaitable<s3::S3Result<void>> GetAcl(Ctx& c);
  // OK for a bucket request or an object that exists; NoSuchKey otherwise.
  asio::awaitable<s3::S3Result<void>> ObjectExists(Ctx& c);
  asio::awaitable<s3::S3Result<void>> PutAcl(Ctx& c);
  // One page of a bucket's names (objects and common prefixes) after `position`.
  struct Listing {
    struct Object {
      std::string key;
      uint64_t size = 0;
      std::string etag;
      int64_t mtime = 0;
    };
    std::vector<Object> objects;
    std::vector<std::string> prefixes;
    bool truncated = false;
    std::string last;  // the last key or prefix returned
  };
  Result<Listing> ListBucket(const std::string& bucket, const std::string& prefix,
                             const std::string& delimiter, const std::string& position,
                             size_t max_keys);
  // The KV extensions (s3_kv_extensions.cc, s3_operations.cc).
  asio::awaitable<s3::S3Result<void>> GetKvLayout(Ctx& c);
  asio::awaitable<s3::S3Result<void>> BatchLookup(Ctx& c);
  // Pins chunks against eviction for a time (docs/s3-api.md, "Pinned prefixes").
  asio::awaitable<s3::S3Result<void>> PinKeys(Ctx& c);
  // The "keys" of a lookup or pin body ({"keys": [...], ...}, at most max_lookup_keys, chunk
  // keys in a KV-layout bucket) as store names, and the whole parsed body.
  s3::S3Result<std::vector<std::string>> BodyKeys(const Ctx& c, const nlohmann::json& body,
                                                  std::string_view what) const;
  // The layerwise aggregated retrieval of docs/wire-format.md (layerwise.cc).
  asio::awaitable<s3::S3Result<void>> LayerwiseRetrieve(Ctx& c);
  // Many objects in one request (batch_store.cc).
  asio::awaitable<s3::S3Result<void>> BatchStore(Ctx& c);
  // Objects (s3_objects.cc).
  asio::awaitable<s3::S3Result<void>> PutObject(Ctx& c);
  asio::awaitable<s3::S3Result<void>> GetObjectBody(Ctx& c);
  asio::awaitable<s3::S3Result<void>> HeadObject(Ctx& c);
  asio::awaitable<s3::S3Result<void>> GetObject(Ctx& c, bool head);
  asio::awaitable<s3::S3Result<void>> GetObjectAttributes(Ctx& c);
  asio::awaitable<s3::S3Result<void>> DeleteObject(Ctx& c);
  asio::awaitable<s3::S3Result<void>> DeleteObjects(Ctx& c);
  asio::awaitable<s3::S3Result<void>> CopyObject(Ctx& c);
  // Multipart (s3_multipart.cc).
  asio::awaitable<s3::S3Result<void>> ListUploads(Ctx& c);
  asio::awaitable<s3::S3Result<void>> CreateMultipart(Ctx& c);
  asio::awaitable<s3::S3Result<void>> UploadPart(Ctx& c);
  asio::awaitable<s3::S3Result<void>> CompleteMultipart(Ctx& c);
  asio::awaitable<s3::S3Result<void>> AbortMultipart(Ctx& c);
  asio::awaitable<s3::S3Result<void>> ListParts(Ctx& c);
  // Multipart housekeeping (s3_multipart.cc); blocking, run on the pool.
  struct Upload {
    std::string key;
    ObjectAttributes attrs;
    int64_t created = 0;
  };
  // NotFound for a malformed, unknown or expired id (an expired one is removed on the way).
  Result<Upload> LoadUpload(const std::string& bucket, const std::string& id);
  bool UploadExpired(std::string_view id) const;
  // Removes expired uploads of `bucket` (of every bucket when empty); returns how many.
  Result<size_t> RemoveExpiredUploads(const std::string& bucket);
  // Removes every upload of `bucket`, parts and all (DeleteBucket).
  Status RemoveBucketUploads(const std::string& bucket);
  // Runs RemoveExpiredUploads("") now and then on the pool, until the handler goes away.
  void ScheduleUploadSweep();

  // Streams the request body into store object `store_key` with `attributes`, checking
  // Content-MD5, x-amz-content-sha256 or the chunk signatures, and (for KV buckets) the chunk
  // format. Returns `attributes` as stored: with the ETag (the hex MD5 of the payload) and the
  // checksum the payload matched. The commit honours `condition`'s if_absent and if_attributes
  // (CommitFailure).
  asio::awaitable<s3::S3Result<ObjectAttributes>> ReceiveBody(Ctx& c, const std::string& store_key,
                                                              ObjectAttributes attributes,
                                                              const std::optional<ModelPreset>& kv,
                                                              const PutOptions& condition);
  // 200 to a PutObject or UploadPart that stored `stored`: its ETag and checksum, as S3 answers.
  asio::awaitable<s3::S3Result<void>> ReplyStored(Ctx& c, const ObjectAttributes& stored);
  // One version of an object, opened, with its S3 metadata.
  struct ObjectVersion {
    std::unique_ptr<ObjectReader> reader;
    ObjectAttributes attributes;
  };
  // Opens store object `store_key`: NoSuchKey when absent, InternalError when its metadata is
  // damaged. Blocking.
  s3::S3Result<ObjectVersion> OpenObjectVersion(const std::string& store_key);
  // The conditional write a PUT or a complete asks for (docs/s3-api.md, "Conditional
  // writes"): If-None-Match: * creates only; If-Match: ETAG (or *) replaces only that version.
  struct WriteCondition {
    bool create_only = false;
    std::optional<std::string> if_match;
  };
  // InvalidRequest for both at once, NotImplemented for If-None-Match with an ETag or a store
  // without conditional puts.
  s3::S3Result<WriteCondition> ParseWriteCondition(const s3::S3Request& r) const;
  // The store put options that enforce `condition` on `store_key`: for If-Match, the current
  // version's attributes, to be swapped only if still current (NoSuchKey when there is none,
  // PreconditionFailed when its ETag is not named). Blocking.
  s3::S3Result<PutOptions> ConditionalPutOptions(const WriteCondition& condition,
                                                 const std::string& store_key);
  // Deletes store object `store_key` if `conditions` hold (docs/s3-api.md): OK when absent
  // without If-Match, NoSuchKey when absent with it, PreconditionFailed when a condition does
  // not hold, ConditionalRequestConflict when the object changed between check and delete.
  // Blocking.
  s3::S3Result<void> DeleteObjectIf(const std::string& store_key,
                                    const DeleteConditions& conditions);
  // Reads a small request body (XML or JSON), checked like any other.
  asio::awaitable<s3::S3Result<std::string>> ReadSmallBody(Ctx& c, size_t limit);
  // The bucket's description; cached for kBucketCacheTtl (a bucket deleted through another
  // gateway may be seen for that long), dropped at once on a delete through this one.
  asio::awaitable<s3::S3Result<BucketInfo>> FindBucket(const std::string& bucket);
  void ForgetBucket(const std::string& bucket);
  asio::awaitable<void> SendError(Ctx& c, const s3::S3Error& e);
  // An operation's answer, with the request's id among its headers: a handler ends with
  // `co_return co_await Reply(...)`. A response that cannot be sent is the connection's failure,
  // not the operation's, so the result is success either way.
  asio::awaitable<s3::S3Result<void>> Reply(Ctx& c, unsigned status, Headers headers = {},
                                            std::string body = "");
  // Reply(c, 200) with an XML or a JSON document. (gcc 12 cannot compile headers written as a
  // braced list of string literals inside a co_await: a handler builds them first.)
  asio::awaitable<s3::S3Result<void>> ReplyXml(Ctx& c, std::string xml);
  asio::awaitable<s3::S3Result<void>> ReplyJson(Ctx& c, std::string json);

  template <typename F>
  auto Blocking(F fn) {
    return RunBlocking(pool_, std::move(fn));
  }

  Store* store_;
  ServerMetrics* metrics_;
  S3Options options_;
  sched::Pacer pacer_;  // layerwise responses under the bandwidth cap
  asio::thread_pool pool_;
  MemoryBudget memory_;
  MemoryBudget open_batch_objects_;  // counts objects, not bytes (max_open_batch_objects)
  // Layerwise read windows kept between responses: two responses' worth (window_buffers.h).
  std::shared_ptr<WindowBuffers> windows_;
  asio::strand<asio::thread_pool::executor_type> sweep_strand_;
  asio::steady_timer sweep_timer_;  // on sweep_strand_
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> request_counter_{0};
  static constexpr std::chrono::seconds kBucketCacheTtl{2};
  struct CachedBucket {
    BucketInfo info;
    std::chrono::steady_clock::time_point expires;
  };
  std::mutex credentials_mu_;
  std::shared_ptr<const Credentials> credentials_;  // guarded by credentials_mu_
  std::mutex bucket_create_mu_;  // CreateBucket on a store without conditional puts
  std::mutex bucket_cache_mu_;
  std::unordered_map<std::string, CachedBucket> bucket_cache_;  // guarded by bucket_cache_mu_
};

}  // namespace objectcache::server
