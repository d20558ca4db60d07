// S3 errors: the code S3 uses, its HTTP status, and the XML body every S3 client parses.
//
// The one table (s3_error.cc) maps S3 error codes to HTTP statuses and canonical Status codes
// to S3 error codes; nothing else in the server picks a status number for an error.
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "objectcache/status.h"

namespace objectcache::s3 {

struct S3Error {
  std::string code;     // "NoSuchKey", "SignatureDoesNotMatch", ...
  std::string message;  // for people
  std::string resource;

  int HttpStatus() const;
  // <?xml ...?><Error><Code>..</Code><Message>..</Message><Resource>..</Resource>
  // <RequestId>..</RequestId></Error>
  std::string ToXml(std::string_view request_id) const;
};

template <typename T>
using S3Result = std::expected<T, S3Error>;

inline S3Error MakeS3Error(std::string code, std::string message) {
  return S3Error{std::move(code), std::move(message), ""};
}

// A signature that cannot be read: in the query string of a presigned URL, or in the
// Authorization header.
inline S3Error SignatureMalformed(bool presigned, std::string message) {
  return MakeS3Error(
      presigned ? "AuthorizationQueryParametersError" : "AuthorizationHeaderMalformed",
      std::move(message));
}

// A store or core failure as the S3 error a client expects (NotFound on an object is
// NoSuchKey, ResourceExhausted is a 507-style InsufficientStorage, DataLoss a 500, ...).
S3Error FromStatus(const Status& status);

}  // namespace objectcache::s3
