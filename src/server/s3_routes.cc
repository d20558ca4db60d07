#include "server/s3_routes.h"

#include <optional>
#include <string>

namespace objectcache::server {
namespace {

enum class Scope { kService, kBucket, kObject };

struct Implemented {
  std::string_view sub_resource;
  Scope scope;
  std::string_view method;
  S3Route route;
};

// Sub-resources with an implementation, by scope and method.
constexpr Implemented kImplemented[] = {
    {"location", Scope::kBucket, "GET", S3Route::kGetBucketLocation},
    {"versions", Scope::kBucket, "GET", S3Route::kListObjectVersions},
    {"versioning", Scope::kBucket, "GET", S3Route::kGetBucketVersioning},
    {"versioning", Scope::kBucket, "PUT", S3Route::kPutBucketVersioning},
    {"acl", Scope::kBucket, "GET", S3Route::kGetBucketAcl},
    {"acl", Scope::kBucket, "PUT", S3Route::kPutBucketAcl},
    {"uploads", Scope::kBucket, "GET", S3Route::kListMultipartUploads},
    {"delete", Scope::kBucket, "POST", S3Route::kDeleteObjects},
    {"kv-layout", Scope::kBucket, "GET", S3Route::kGetKvLayout},
    {"lookup", Scope::kBucket, "POST", S3Route::kBatchLookup},
    {"layerwise", Scope::kBucket, "POST", S3Route::kLayerwiseRetrieve},
    {"batch-store", Scope::kBucket, "POST", S3Route::kBatchStore},
    {"pin", Scope::kBucket, "POST", S3Route::kPin},
    {"acl", Scope::kObject, "GET", S3Route::kGetObjectAcl},
    {"attributes", Scope::kObject, "GET", S3Route::kGetObjectAttributes},
    {"acl", Scope::kObject, "PUT", S3Route::kPutObjectAcl},
    {"uploads", Scope::kObject, "POST", S3Route::kCreateMultipartUpload},
    {"uploadId", Scope::kObject, "PUT", S3Route::kUploadPart},
    {"uploadId", Scope::kObject, "GET", S3Route::kListParts},
    {"uploadId", Scope::kObject, "POST", S3Route::kCompleteMultipartUpload},
    {"uploadId", Scope::kObject, "DELETE", S3Route::kAbortMultipartUpload},
};

// Sub-resources S3 defines that are implemented nowhere here (501 NotImplemented), from the S3
// API reference. partNumber is one only without uploadId (GetObject of one part).
constexpr std::string_view kNotImplemented[] = {
    "accelerate",
    "analytics",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "session",
    "tagging",
    "torrent",
    "website",
    "renameObject",
};

std::string_view ScopeName(Scope s) {
  return s == Scope::kService ? "the service" : s == Scope::kBucket ? "a bucket" : "an object";
}

s3::S3Error NotImplemented(std::string_view method, std::string_view sub, Scope scope) {
  return s3::MakeS3Error("NotImplemented", std::string(method) + " ?" + std::string(sub) + " on " +
                                               std::string(ScopeName(scope)) +
                                               " is not implemented");
}

// A request header that asks for what no object here gets: a grant or a canned ACL other than
// private (access is by credentials), server-side encryption with S3's or the client's keys (the
// store's disk or Ceph encrypts, not this server), object lock, tags. Taken silently, a client
// would believe an object public, encrypted or locked that is none of these.
std::optional<s3::S3Error> UnkeptHeader(const s3::S3Request& r) {
  for (const auto& [name, value] : r.headers) {
    std::string_view what;
    if (name.starts_with("x-amz-grant-") || (name == "x-amz-acl" && !IsOwnerOnlyAcl(value))) {
      what = "an ACL other than private";
    } else if (name.starts_with("x-amz-server-side-encryption") ||
               name.starts_with("x-amz-copy-source-server-side-encryption")) {
      what = "server-side encryption";
    } else if (name.starts_with("x-amz-object-lock-") ||
               (name == "x-amz-bucket-object-lock-enabled" && value != "false")) {
      what = "object lock";
    } else if (name == "x-amz-tagging") {
      what = "tags";
    }
    if (!what.empty()) {
      return s3::MakeS3Error("NotImplemented", name + " asks for " + std::string(what) +
                                                   ", which objectcache does not keep");
    }
  }
  return std::nullopt;
}

}  // namespace

bool IsOwnerOnlyAcl(std::string_view canned) {
  return canned == "private" || canned == "bucket-owner-full-control";
}

bool IsSubResource(std::string_view name) {
  for (const Implemented& i : kImplemented) {
    if (i.sub_resource == name) return true;
  }
  for (std::string_view n : kNotImplemented) {
    if (n == name) return true;
  }
  return name == "partNumber";
}

s3::S3Result<S3Route> RouteS3Request(const s3::S3Request& r) {
  if (std::optional<s3::S3Error> unkept = UnkeptHeader(r)) return std::unexpected(*unkept);
  const Scope scope = r.bucket.empty() ? Scope::kService
                      : r.key.empty()  ? Scope::kBucket
                                       : Scope::kObject;
  const std::string& m = r.method;
  std::optional<S3Route> named;
  for (const auto& [name, value] : r.query) {
    if (name == "partNumber" && (scope != Scope::kObject || r.HasQuery("uploadId"))) continue;
    if (!IsSubResource(name)) continue;
    std::optional<S3Route> route;
    for (const Implemented& i : kImplemented) {
      if (i.sub_resource == name && i.scope == scope && i.method == m) route = i.route;
    }
    if (!route) return std::unexpected(NotImplemented(m, name, scope));
    if (named && *named != *route) {
      return std::unexpected(
          s3::MakeS3Error("InvalidRequest", "the request names two operations (?" + name + ")"));
    }
    named = route;
  }
  if (named) return *named;
  auto not_allowed = [] {
    return std::unexpected(s3::MakeS3Error(
        "MethodNotAllowed", "The specified method is not allowed against this resource"));
  };
  switch (scope) {
    case Scope::kService:
      if (m == "GET") return S3Route::kListBuckets;
      return not_allowed();
    case Scope::kBucket: {
      if (m == "PUT") return S3Route::kCreateBucket;
      if (m == "DELETE") return S3Route::kDeleteBucket;
      if (m == "HEAD") return S3Route::kHeadBucket;
      const std::string* list_type = r.Query("list-type");
      if (m == "GET")
        return list_type && *list_type == "2" ? S3Route::kListObjectsV2 : S3Route::kListObjects;
      return not_allowed();
    }
    case Scope::kObject:
      if (m == "PUT") {
        return r.Header("x-amz-copy-source") ? S3Route::kCopyObject : S3Route::kPutObject;
      }
      if (m == "GET") return S3Route::kGetObject;
      if (m == "HEAD") return S3Route::kHeadObject;
      if (m == "DELETE") return S3Route::kDeleteObject;
      return not_allowed();
  }
  return not_allowed();
}

}  // namespace objectcache::server
