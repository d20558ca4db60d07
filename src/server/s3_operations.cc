// Routing, then the operation (docs/s3-api.md): Dispatch authenticates a request, asks
// RouteS3Request (s3_routes.h) which operation it names, and runs that operation's row of the
// table below; the handlers live in one file per family.
#include <ctime>

#include "s3/sigv2.h"
#include "server/metrics_handler.h"
#include "server/s3_handler.h"
#include "server/s3_routes.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

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
  const Operation* op = FindOperation(*route);
  if (op == nullptr) {
    co_return Fail("MethodNotAllowed", "The specified method is not allowed against this resource");
  }
  // A SigV2 signature does not cover the extensions' sub-resources (they are not in its
  // canonical resource): a signed lookup could be replayed as a batch store.
  if (!op->sigv2 && c.id && c.id->signature_version == 2) {
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
  c.op = op->metric;
  if (op->needs_bucket) {
    S3Result<BucketInfo> bucket = co_await FindBucket(r.bucket);
    if (!bucket) co_return std::unexpected(bucket.error());
    c.bucket = std::move(*bucket);
  }
  co_return co_await (this->*op->run)(c);
}

// One row per operation: the route that names it, the label it is counted under, whether the
// bucket it names must exist (found once, before the handler runs), whether a Signature Version
// 2 may sign it, and its handler. Adding an operation is a row here and its handler.
const S3Handler::Operation* S3Handler::FindOperation(S3Route route) {
  using H = S3Handler;
  static constexpr Operation kOperations[] = {
      // Service and buckets (s3_buckets.cc).
      {S3Route::kListBuckets, S3Op::kListBuckets, false, true, &H::ListBuckets},
      {S3Route::kCreateBucket, S3Op::kCreateBucket, false, true, &H::CreateBucket},
      {S3Route::kDeleteBucket, S3Op::kDeleteBucket, true, true, &H::DeleteBucket},
      {S3Route::kHeadBucket, S3Op::kHeadBucket, true, true, &H::HeadBucket},
      {S3Route::kGetBucketLocation, S3Op::kOther, true, true, &H::GetBucketLocation},
      // Listings (s3_listings.cc, s3_versions_acl.cc).
      {S3Route::kListObjects, S3Op::kListObjects, true, true, &H::ListObjectsV1},
      {S3Route::kListObjectsV2, S3Op::kListObjects, true, true, &H::ListObjectsV2},
      {S3Route::kListObjectVersions, S3Op::kListObjects, true, true, &H::ListObjectVersions},
      // Versioning and ACLs as an unversioned, single-owner cache answers them
      // (s3_versions_acl.cc).
      {S3Route::kGetBucketVersioning, S3Op::kOther, true, true, &H::GetBucketVersioning},
      {S3Route::kPutBucketVersioning, S3Op::kOther, true, true, &H::PutBucketVersioning},
      {S3Route::kGetBucketAcl, S3Op::kOther, true, true, &H::GetAcl},
      {S3Route::kPutBucketAcl, S3Op::kOther, true, true, &H::PutAcl},
      {S3Route::kGetObjectAcl, S3Op::kOther, true, true, &H::GetAcl},
      {S3Route::kPutObjectAcl, S3Op::kOther, true, true, &H::PutAcl},
      // Objects (s3_objects.cc).
      {S3Route::kPutObject, S3Op::kPutObject, true, true, &H::PutObject},
      {S3Route::kCopyObject, S3Op::kCopyObject, true, true, &H::CopyObject},
      {S3Route::kGetObject, S3Op::kGetObject, true, true, &H::GetObjectBody},
      {S3Route::kHeadObject, S3Op::kHeadObject, true, true, &H::HeadObject},
      {S3Route::kGetObjectAttributes, S3Op::kHeadObject, true, true, &H::GetObjectAttributes},
      {S3Route::kDeleteObject, S3Op::kDeleteObject, true, true, &H::DeleteObject},
      {S3Route::kDeleteObjects, S3Op::kDeleteObjects, true, true, &H::DeleteObjects},
      // Multipart uploads (s3_multipart.cc).
      {S3Route::kListMultipartUploads, S3Op::kOther, true, true, &H::ListUploads},
      {S3Route::kCreateMultipartUpload, S3Op::kCreateMultipart, true, true, &H::CreateMultipart},
      {S3Route::kUploadPart, S3Op::kUploadPart, true, true, &H::UploadPart},
      {S3Route::kListParts, S3Op::kListParts, true, true, &H::ListParts},
      {S3Route::kCompleteMultipartUpload, S3Op::kCompleteMultipart, true, true,
       &H::CompleteMultipart},
      {S3Route::kAbortMultipartUpload, S3Op::kAbortMultipart, true, true, &H::AbortMultipart},
      // The KV extensions (s3_kv_extensions.cc, layerwise.cc, batch_store.cc): SigV4 only.
      {S3Route::kGetKvLayout, S3Op::kOther, true, false, &H::GetKvLayout},
      {S3Route::kBatchLookup, S3Op::kBatchLookup, true, false, &H::BatchLookup},
      {S3Route::kPin, S3Op::kPin, true, false, &H::PinKeys},
      {S3Route::kLayerwiseRetrieve, S3Op::kLayerwise, true, false, &H::LayerwiseRetrieve},
      {S3Route::kBatchStore, S3Op::kBatchStore, true, false, &H::BatchStore},
  };
  for (const Operation& op : kOperations) {
    if (op.route == route) return &op;
  }
  return nullptr;
}

asio::awaitable<S3Result<void>> S3Handler::HeadBucket(Ctx& c) {
  Headers h{{"x-amz-request-id", c.request_id}};
  (void)co_await c.ex.RespondHeaderOnly(200, std::move(h), 0);
  co_return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::GetBucketLocation(Ctx& c) {
  XmlWriter w;
  w.Open("LocationConstraint", true);
  w.Close("LocationConstraint");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::GetKvLayout(Ctx& c) {
  if (!c.bucket.layout) co_return Fail("NoSuchKey", "bucket is not bound to a KV layout");
  co_return co_await ReplyJson(c, ModelToJson(*c.bucket.layout));
}

}  // namespace objectcache::server
