#include "s3/sigv2.h"

#include <algorithm>
#include <map>
#include <vector>

#include "s3/crypto.h"

namespace objectcache::s3 {
namespace {

constexpr std::time_t kMaxSkewSeconds = 15 * 60;
constexpr std::time_t kMaxPresignedSeconds = 7 * 24 * 3600;

// The query parameters a SigV2 canonical resource keeps (the list clients sign with).
constexpr std::string_view kSignedSubResources[] = {
    "accelerate",
    "acl",
    "cors",
    "defaultObjectAcl",
    "location",
    "logging",
    "partNumber",
    "policy",
    "requestPayment",
    "torrent",
    "versioning",
    "versionId",
    "versions",
    "website",
    "uploads",
    "uploadId",
    "response-content-type",
    "response-content-language",
    "response-expires",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "delete",
    "lifecycle",
    "tagging",
    "restore",
    "storageClass",
    "notification",
    "replication",
    "analytics",
    "metrics",
    "inventory",
    "select",
    "select-type",
    "object-lock",
};

bool IsSignedSubResource(std::string_view name) {
  return std::find(std::begin(kSignedSubResources), std::end(kSignedSubResources), name) !=
         std::end(kSignedSubResources);
}

// "Tue, 27 Mar 2007 19:36:42 GMT" (or +0000); -1 if malformed.
std::time_t ParseRfc1123(const std::string& text) {
  std::tm tm{};
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (end == nullptr) return -1;
  std::string_view zone(end);
  if (zone != " GMT" && zone != " +0000" && zone != " UTC") return -1;
  return ::timegm(&tm);
}

}  // namespace

bool IsSigV2(const S3Request& r) {
  const std::string* auth = r.Header("authorization");
  if (auth != nullptr) return auth->starts_with("AWS ");
  return r.HasQuery("AWSAccessKeyId") && r.HasQuery("Signature");
}

std::string SigV2StringToSign(const S3Request& r, std::string_view date) {
  auto header = [&r](std::string_view name) {
    const std::string* v = r.Header(name);
    return v ? *v : std::string();
  };
  std::string out = r.method + "\n" + header("content-md5") + "\n" + header("content-type") + "\n" +
                    std::string(date) + "\n";
  std::map<std::string, std::string> amz;
  for (const auto& [name, value] : r.headers) {
    if (!name.starts_with("x-amz-")) continue;
    auto [it, inserted] = amz.try_emplace(name, value);
    if (!inserted) it->second += "," + value;
  }
  for (const auto& [name, value] : amz) out += name + ":" + value + "\n";
  // The resource: the path as sent, with the bucket in front for virtual-hosted requests.
  if (r.virtual_host) out += "/" + r.bucket;
  out += r.raw_path;
  std::vector<std::pair<std::string, std::string>> subs;
  for (const auto& [name, value] : r.query) {
    if (IsSignedSubResource(name)) subs.emplace_back(name, value);
  }
  std::stable_sort(subs.begin(), subs.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < subs.size(); ++i) {
    out += (i == 0 ? "?" : "&") + subs[i].first;
    if (!subs[i].second.empty()) out += "=" + subs[i].second;
  }
  return out;
}

S3Result<SigV4Identity> VerifySigV2(const S3Request& r, const SecretLookup& secrets,
                                    std::time_t now) {
  SigV4Identity id;
  id.signature_version = 2;
  std::string access_key, signature, date_field;
  if (const std::string* auth = r.Header("authorization")) {
    std::string_view a = std::string_view(*auth).substr(4);  // after "AWS "
    const size_t colon = a.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == a.size()) {
      return std::unexpected(
          SignatureMalformed(false, "Authorization must be AWS ACCESS_KEY:SIGNATURE"));
    }
    access_key = std::string(a.substr(0, colon));
    signature = std::string(a.substr(colon + 1));
    const std::string* amz_date = r.Header("x-amz-date");
    const std::string* date = r.Header("date");
    if (date != nullptr) date_field = *date;
    const std::string when = amz_date ? *amz_date : date_field;
    const std::time_t signed_at = ParseRfc1123(when);
    if (signed_at < 0) {
      return std::unexpected(
          MakeS3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date"));
    }
    if (signed_at > now + kMaxSkewSeconds || signed_at < now - kMaxSkewSeconds) {
      return std::unexpected(MakeS3Error(
          "RequestTimeTooSkewed",
          "The difference between the request time and the server's time is too large."));
    }
  } else {
    id.presigned = true;
    access_key = *r.Query("AWSAccessKeyId");
    signature = *r.Query("Signature");
    const std::string* expires = r.Query("Expires");
    uint64_t at = 0;
    if (expires == nullptr || !ParseDecimal(*expires, &at) ||
        at > static_cast<uint64_t>(now + kMaxPresignedSeconds)) {
      return std::unexpected(
          SignatureMalformed(true, "Expires must be a time in seconds at most 7 days from now"));
    }
    if (static_cast<std::time_t>(at) < now) {
      return std::unexpected(MakeS3Error("AccessDenied", "Request has expired"));
    }
    date_field = *expires;
  }
  // What a SigV2 signature cannot cover is refused rather than trusted.
  for (const auto& [name, value] : r.headers) {
    if (name.starts_with("x-objectcache-")) {
      return std::unexpected(
          MakeS3Error("AccessDenied", "header " + name +
                                          " is not covered by a Signature Version 2 "
                                          "signature: sign with Signature Version 4"));
    }
  }
  const std::string* payload = r.Header("x-amz-content-sha256");
  id.payload_hash = payload ? *payload : std::string(kUnsignedPayload);
  if (id.payload_hash.starts_with("STREAMING-AWS4")) {
    return std::unexpected(
        SignatureMalformed(id.presigned, "signed streaming payloads need Signature Version 4"));
  }
  const std::string* secret = secrets(access_key);
  if (secret == nullptr) {
    return std::unexpected(MakeS3Error(
        "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."));
  }
  const std::string expected = Base64Encode(HmacSha1(*secret, SigV2StringToSign(r, date_field)));
  if (!ConstantTimeEquals(expected, signature)) {
    return std::unexpected(MakeS3Error(
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided."));
  }
  id.access_key = access_key;
  id.signature = signature;
  return id;
}

}  // namespace objectcache::s3
