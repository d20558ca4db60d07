// Routing: which operation an S3 request names, decided once, before anything runs, from its
// method, whether it addresses the service, a bucket or an object, and its sub-resources (the
// query parameters such as ?acl or ?uploads that name an operation rather than qualify one).
//
// Every sub-resource S3 defines is in the table (s3_routes.cc, and docs/s3-api.md): implemented
// for some methods and scopes, or NotImplemented (501) everywhere else, so a sub-resource the
// server does not implement never falls through to the base operation (PUT /bucket?acl is not
// CreateBucket). Query parameters that are not sub-resources (prefix, max-keys, x-id, ...)
// qualify the operation and do not route.
//
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "s3/s3_error.h"
#include "s3/s3_request.h"

namespace objectcache::server {

enum class S3Route {
  kListBuckets,
  kCreateBucket,
  kDeleteBucket,
  kHeadBucket,
  kListObjects,
  kListObjectsV2,
  kListObjectVersions,
  kGetBucketLocation,
  kGetBucketVersioning,
  kPutBucketVersioning,
  kGetBucketAcl,
  kPutBucketAcl,
  kListMultipartUploads,
  kDeleteObjects,
  kGetKvLayout,  // extensions: docs/s3-api.md, docs/wire-format.md
  kBatchLookup,
  kLayerwiseRetrieve,
  kBatchStore,
  kPin,
  kPutObject,
  kCopyObject,
  kGetObject,
  kHeadObject,
  kGetObjectAttributes,
  kDeleteObject,
  kGetObjectAcl,
  kPutObjectAcl,
  kCreateMultipartUpload,
  kUploadPart,
  kListParts,
  kCompleteMultipartUpload,
  kAbortMultipartUpload,
};

// The operation `request` names. Errors: NotImplemented (501) for a sub-resource S3 defines that
// is not implemented for this method and scope, or for a header that asks for what no object
// here gets (an ACL other than private, server-side encryption, object lock, tags),
// MethodNotAllowed (405) for a method the resource does not take, InvalidRequest for two
// sub-resources that name different operations.
s3::S3Result<S3Route> RouteS3Request(const s3::S3Request& request);

// The canned ACLs that grant nothing beyond the owner's FULL_CONTROL here, where the bucket's
// owner owns every object: private and bucket-owner-full-control.
bool IsOwnerOnlyAcl(std::string_view canned);

// True for the query parameter names S3 defines as sub-resources (all of the table).
bool IsSubResource(std::string_view query_name);

}  // namespace objectcache::server
