// AWS Signature Version 2 for S3 (the "REST authentication" of the S3 developer guide), which
// radosgw and MinIO accept and older SDKs still sign with (boto3's default presigned URLs on
// Debian 12, s3cmd with signature_v2): `Authorization: AWS ACCESS:SIGNATURE`, or a presigned
// URL with AWSAccessKeyId, Expires and Signature. The signature is HMAC-SHA1 over the method,
// Content-MD5, Content-Type, the date (Expires for a URL), every x-amz-* header and the resource
// with its sub-resources.
//
// What it does not cover, and so what the server refuses with it: the payload (it is taken as
// UNSIGNED-PAYLOAD, or as the signed x-amz-content-sha256 says; streaming signed payloads need
// SigV4), the Host, query parameters other than sub-resources, and our x-objectcache-* headers
// (AccessDenied when present). docs/security.md says the same.
//
// Pure functions; thread-safe.
#pragma once

#include <ctime>
#include <string>

#include "s3/s3_error.h"
#include "s3/s3_request.h"
#include "s3/sigv4.h"

namespace objectcache::s3 {

// True when the request carries a SigV2 signature (header or query).
bool IsSigV2(const S3Request& request);

// Verifies a SigV2 request at time `now`: the header form must be dated (Date or x-amz-date)
// within 15 minutes; a URL must not have expired and may live at most 7 days. Errors as
// VerifySigV4's (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, RequestTimeTooSkewed,
// AuthorizationHeaderMalformed / AuthorizationQueryParametersError).
S3Result<SigV4Identity> VerifySigV2(const S3Request& request, const SecretLookup& secrets,
                                    std::time_t now);

// The string a SigV2 signature signs, with `date` in the date position (for tests and clients).
std::string SigV2StringToSign(const S3Request& request, std::string_view date);

}  // namespace objectcache::s3
