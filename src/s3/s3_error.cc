#include "s3/s3_error.h"

#include <utility>

#include "s3/xml.h"

namespace objectcache::s3 {
namespace {

struct CodeStatus {
  std::string_view code;
  int http_status;
};

// The one table of S3 error codes and their HTTP statuses (as AWS S3 answers them).
constexpr CodeStatus kS3Errors[] = {
    {"AccessDenied", 403},
    {"AuthorizationHeaderMalformed", 400},
    {"AuthorizationQueryParametersError", 400},
    {"BadDigest", 400},
    {"BucketAlreadyExists", 409},
    {"BucketAlreadyOwnedByYou", 409},
    {"BucketNotEmpty", 409},
    {"ConditionalRequestConflict", 409},
    {"EntityTooLarge", 400},
    {"EntityTooSmall", 400},
    {"IncompleteBody", 400},
    {"InsufficientStorage", 507},
    {"InternalError", 500},
    {"InvalidAccessKeyId", 403},
    {"InvalidArgument", 400},
    {"InvalidBucketName", 400},
    {"InvalidChunkObject", 400},
    {"InvalidDigest", 400},
    {"InvalidPart", 400},
    {"InvalidPartOrder", 400},
    {"InvalidRange", 416},
    {"InvalidRequest", 400},
    {"InvalidURI", 400},
    {"KeyTooLongError", 400},
    {"MalformedXML", 400},
    {"MetadataTooLarge", 400},
    {"MethodNotAllowed", 405},
    {"MissingContentLength", 411},
    {"MissingSecurityHeader", 400},
    {"NoSuchBucket", 404},
    {"NoSuchKey", 404},
    {"NoSuchUpload", 404},
    {"NoSuchVersion", 404},
    {"NotImplemented", 501},
    {"NotModified", 304},
    {"PreconditionFailed", 412},
    {"QuotaExceeded", 403},
    {"RequestHeaderSectionTooLarge", 400},
    {"RequestTimeTooSkewed", 403},
    {"RequestTimeout", 400},
    {"ServiceUnavailable", 503},
    {"SignatureDoesNotMatch", 403},
    {"SlowDown", 503},
    {"XAmzContentSHA256Mismatch", 400},
};

// Canonical status codes as S3 error codes, when the operation gives no better one.
std::string_view CodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound:
      return "NoSuchKey";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kOutOfRange:
      return "InvalidRange";
    case StatusCode::kResourceExhausted:
      return "InsufficientStorage";
    case StatusCode::kPermissionDenied:
    case StatusCode::kUnauthenticated:
      return "AccessDenied";
    case StatusCode::kUnavailable:
      return "ServiceUnavailable";
    case StatusCode::kDeadlineExceeded:
      return "RequestTimeout";
    case StatusCode::kUnimplemented:
      return "NotImplemented";
    case StatusCode::kFailedPrecondition:
      return "PreconditionFailed";
    default:
      return "InternalError";
  }
}

}  // namespace

int S3Error::HttpStatus() const {
  for (const CodeStatus& e : kS3Errors) {
    if (e.code == code) return e.http_status;
  }
  return 500;
}

std::string S3Error::ToXml(std::string_view request_id) const {
  XmlWriter w;
  w.Open("Error");
  w.Element("Code", code);
  w.Element("Message", message);
  if (!resource.empty()) w.Element("Resource", resource);
  w.Element("RequestId", request_id);
  w.Close("Error");
  return w.Finish();
}

S3Error FromStatus(const Status& status) {
  // A tenant's quota (store/quota_store.h) is the client's to fix, not the server's storage.
  if (status.reason() == StatusReason::kQuotaExceeded) {
    return S3Error{"QuotaExceeded", status.message(), ""};
  }
  return S3Error{std::string(CodeFor(status.code())), status.message(), ""};
}

}  // namespace objectcache::s3
