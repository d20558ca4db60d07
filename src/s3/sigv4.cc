#include "s3/sigv4.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "core/utc_time.h"
#include "s3/crypto.h"

namespace objectcache::s3 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr std::time_t kMaxSkewSeconds = 15 * 60;
constexpr long kMaxPresignedSeconds = 7 * 24 * 3600;

std::string Trim(std::string_view v) {
  // Trim and collapse runs of spaces, as the canonical header form requires.
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query,
                           bool skip_signature) {
  std::vector<std::pair<std::string, std::string>> enc;
  for (const auto& [k, v] : query) {
    if (skip_signature && k == "X-Amz-Signature") continue;
    enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  }
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

// The canonical URI: the path decoded once and encoded again the AWS way (S3 does not
// double-encode).
std::string CanonicalUri(std::string_view raw_path) {
  std::string decoded;
  if (!PercentDecode(raw_path, &decoded)) decoded = std::string(raw_path);
  return UriEncode(decoded, true);
}

struct Canonical {
  std::string request;
  std::string signed_headers;
};

S3Result<Canonical> CanonicalRequest(
    std::string_view method, std::string_view raw_path,
    const std::vector<std::pair<std::string, std::string>>& query, bool presigned,
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::string_view signed_headers, std::string_view payload_hash) {
  // Signed header names, in the order given (they must be sorted and lowercase).
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : headers) {
    auto [it, inserted] = values.try_emplace(k, Trim(v));
    if (!inserted) it->second += "," + Trim(v);
  }
  std::string canonical_headers;
  std::string_view rest = signed_headers;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string name(rest.substr(0, semi));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    auto it = values.find(name);
    if (it == values.end()) {
      return std::unexpected(MakeS3Error("SignatureDoesNotMatch",
                                         "signed header '" + name + "' is not in the request"));
    }
    canonical_headers += name + ":" + it->second + "\n";
  }
  Canonical c;
  c.signed_headers = std::string(signed_headers);
  c.request = std::string(method) + "\n" + CanonicalUri(raw_path) + "\n" +
              CanonicalQuery(query, presigned) + "\n" + canonical_headers + "\n" +
              c.signed_headers + "\n" + std::string(payload_hash);
  return c;
}

std::string StringToSign(std::string_view amz_date, std::string_view scope,
                         std::string_view canonical_request) {
  return std::string(kAlgorithm) + "\n" + std::string(amz_date) + "\n" + std::string(scope) + "\n" +
         ToHex(Sha256(canonical_request));
}

// "20261130T142005Z" -> seconds since the epoch; -1 if malformed.
std::time_t ParseAmzDate(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return -1;
  auto num = [&](size_t pos, size_t len, int* out) {
    auto [end, ec] = std::from_chars(s.data() + pos, s.data() + pos + len, *out);
    return ec == std::errc() && end == s.data() + pos + len;
  };
  std::tm tm{};
  int y, mo, d, h, mi, se;
  if (!num(0, 4, &y) || !num(4, 2, &mo) || !num(6, 2, &d) || !num(9, 2, &h) || !num(11, 2, &mi) ||
      !num(13, 2, &se)) {
    return -1;
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  return ::timegm(&tm);
}

struct CredentialScope {
  std::string access_key, date, region, service;
  std::string scope;  // date/region/service/aws4_request
};

bool ParseCredential(std::string_view credential, CredentialScope* out) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t slash = credential.find('/', start);
    parts.push_back(credential.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 5 || parts[4] != "aws4_request" || parts[0].empty() || parts[1].size() != 8) {
    return false;
  }
  out->access_key = std::string(parts[0]);
  out->date = std::string(parts[1]);
  out->region = std::string(parts[2]);
  out->service = std::string(parts[3]);
  out->scope = out->date + "/" + out->region + "/" + out->service + "/aws4_request";
  return true;
}

}  // namespace

std::string AmzDate(std::time_t t) { return FormatUtc(t, "%Y%m%dT%H%M%SZ"); }

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  std::string k = HmacSha256("AWS4" + std::string(secret), date);
  k = HmacSha256(k, region);
  k = HmacSha256(k, service);
  return HmacSha256(k, "aws4_request");
}

bool IsSigned(const S3Request& request) {
  return request.Header("authorization") != nullptr || request.HasQuery("X-Amz-Signature") ||
         request.HasQuery("X-Amz-Credential") || request.HasQuery("AWSAccessKeyId");
}

std::string ClaimedAccessKey(const S3Request& request) {
  auto before = [](std::string_view s, char c) { return std::string(s.substr(0, s.find(c))); };
  if (const std::string* auth = request.Header("authorization")) {
    std::string_view a = *auth;
    if (a.starts_with("AWS ")) return before(a.substr(4), ':');
    const size_t at = a.find("Credential=");
    return at == std::string_view::npos ? std::string() : before(a.substr(at + 11), '/');
  }
  if (const std::string* cred = request.Query("X-Amz-Credential")) return before(*cred, '/');
  if (const std::string* key = request.Query("AWSAccessKeyId")) return *key;
  return std::string();
}

bool MustBeSigned(std::string_view header) {
  return header == "host" || header == "content-md5" || header.starts_with("x-amz-") ||
         header.starts_with("x-objectcache-");
}

S3Result<SigV4Identity> VerifySigV4(const S3Request& request, const SecretLookup& secrets,
                                    std::time_t now, std::string_view region) {
  SigV4Identity id;
  std::string credential, signed_headers, signature, amz_date;
  long expires = 0;
  if (const std::string* auth = request.Header("authorization")) {
    std::string_view a = *auth;
    if (!a.starts_with(kAlgorithm)) {
      return std::unexpected(
          SignatureMalformed(false, "only AWS4-HMAC-SHA256 (Signature Version 4) is supported"));
    }
    a.remove_prefix(kAlgorithm.size());
    // Credential=..., SignedHeaders=..., Signature=...
    while (!a.empty()) {
      while (!a.empty() && (a.front() == ' ' || a.front() == ',')) a.remove_prefix(1);
      size_t eq = a.find('=');
      if (eq == std::string_view::npos) break;
      std::string_view name = a.substr(0, eq);
      a.remove_prefix(eq + 1);
      size_t comma = a.find(',');
      std::string_view value = a.substr(0, comma);
      a = comma == std::string_view::npos ? std::string_view() : a.substr(comma + 1);
      if (name == "Credential")
        credential = Trim(value);
      else if (name == "SignedHeaders")
        signed_headers = Trim(value);
      else if (name == "Signature")
        signature = Trim(value);
    }
    const std::string* date = request.Header("x-amz-date");
    if (date == nullptr) date = request.Header("date");
    if (date != nullptr) amz_date = *date;
    const std::string* payload = request.Header("x-amz-content-sha256");
    if (payload == nullptr) {
      return std::unexpected(
          MakeS3Error("InvalidRequest", "x-amz-content-sha256 header is required"));
    }
    id.payload_hash = *payload;
  } else if (request.HasQuery("X-Amz-Signature")) {
    id.presigned = true;
    const std::string* algorithm = request.Query("X-Amz-Algorithm");
    const std::string* cred = request.Query("X-Amz-Credential");
    const std::string* date = request.Query("X-Amz-Date");
    const std::string* exp = request.Query("X-Amz-Expires");
    const std::string* sh = request.Query("X-Amz-SignedHeaders");
    if (!algorithm || *algorithm != kAlgorithm || !cred || !date || !exp || !sh) {
      return std::unexpected(
          SignatureMalformed(true,
                             "presigned URL lacks X-Amz-Algorithm, Credential, Date, Expires or "
                             "SignedHeaders"));
    }
    credential = *cred;
    amz_date = *date;
    signed_headers = *sh;
    signature = *request.Query("X-Amz-Signature");
    auto [end, ec] = std::from_chars(exp->data(), exp->data() + exp->size(), expires);
    if (ec != std::errc() || end != exp->data() + exp->size() || expires < 1 ||
        expires > kMaxPresignedSeconds) {
      return std::unexpected(SignatureMalformed(true, "X-Amz-Expires must be 1 to 604800 seconds"));
    }
    const std::string* payload = request.Header("x-amz-content-sha256");
    id.payload_hash = payload ? *payload : std::string(kUnsignedPayload);
  } else {
    return std::unexpected(MakeS3Error("AccessDenied", "request is not signed"));
  }

  CredentialScope scope;
  if (!ParseCredential(credential, &scope)) {
    return std::unexpected(
        SignatureMalformed(id.presigned, "malformed Credential '" + credential + "'"));
  }
  if (scope.service != "s3") {
    return std::unexpected(
        SignatureMalformed(id.presigned, "credential scope must be for service s3"));
  }
  if (signed_headers.empty() || signature.size() != 64) {
    return std::unexpected(SignatureMalformed(id.presigned, "missing SignedHeaders or Signature"));
  }
  if (scope.region != region) {
    return std::unexpected(SignatureMalformed(
        id.presigned,
        "the region '" + scope.region + "' is wrong; expecting '" + std::string(region) + "'"));
  }
  // Trust a request only for what its signature covers: a header the server acts on that the
  // signature does not cover (say x-amz-copy-source added to a presigned PUT) refuses it.
  {
    std::vector<std::string_view> covered;
    for (std::string_view rest = signed_headers; !rest.empty();) {
      const size_t semi = rest.find(';');
      covered.push_back(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    }
    auto is_covered = [&](std::string_view h) {
      return std::find(covered.begin(), covered.end(), h) != covered.end();
    };
    if (!is_covered("host")) {
      return std::unexpected(MakeS3Error("AccessDenied", "the host header must be signed"));
    }
    for (const auto& [name, value] : request.headers) {
      if (MustBeSigned(name) && !is_covered(name)) {
        return std::unexpected(MakeS3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed: " + name));
      }
    }
  }
  const std::time_t signed_at = ParseAmzDate(amz_date);
  if (signed_at < 0 || amz_date.substr(0, 8) != scope.date) {
    return std::unexpected(
        SignatureMalformed(id.presigned, "bad or mismatched X-Amz-Date '" + amz_date + "'"));
  }
  if (id.presigned) {
    if (now > signed_at + expires) {
      return std::unexpected(MakeS3Error("AccessDenied", "Request has expired"));
    }
    if (signed_at > now + kMaxSkewSeconds) {
      return std::unexpected(MakeS3Error("AccessDenied", "Request is not valid yet"));
    }
  } else if (signed_at > now + kMaxSkewSeconds || signed_at < now - kMaxSkewSeconds) {
    return std::unexpected(
        MakeS3Error("RequestTimeTooSkewed",
                    "The difference between the request time and the server's time is too large."));
  }
  const std::string* secret = secrets(scope.access_key);
  if (secret == nullptr) {
    return std::unexpected(MakeS3Error(
        "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."));
  }
  auto canonical = CanonicalRequest(request.method, request.raw_path, request.query, id.presigned,
                                    request.headers, signed_headers, id.payload_hash);
  if (!canonical) return std::unexpected(canonical.error());
  const std::string key = SigningKey(*secret, scope.date, scope.region, scope.service);
  const std::string expected =
      ToHex(HmacSha256(key, StringToSign(amz_date, scope.scope, canonical->request)));
  if (!ConstantTimeEquals(expected, signature)) {
    return std::unexpected(MakeS3Error(
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided."));
  }
  id.access_key = scope.access_key;
  id.signing_key = key;
  id.amz_date = amz_date;
  id.scope = scope.scope;
  id.signature = signature;
  return id;
}

namespace {
// A streaming signature: `algorithm`, the request's date and scope, the signature before this
// one, then what this one covers, a line each.
std::string StreamingSignature(std::string_view signing_key, std::string_view algorithm,
                               std::string_view amz_date, std::string_view scope,
                               std::string_view previous_signature, std::string_view covered) {
  std::string to_sign;
  for (std::string_view line : {algorithm, amz_date, scope, previous_signature})
    to_sign.append(line).append("\n");
  to_sign.append(covered);
  return ToHex(HmacSha256(signing_key, to_sign));
}
}  // namespace

std::string ChunkSignature(std::string_view signing_key, std::string_view amz_date,
                           std::string_view scope, std::string_view previous_signature,
                           std::string_view chunk_sha256_hex) {
  return StreamingSignature(signing_key, "AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope,
                            previous_signature,
                            std::string(kEmptySha256) + "\n" + std::string(chunk_sha256_hex));
}

bool ChunkSignatureChain::Verify(std::string_view chunk_sha256_hex, std::string_view signature) {
  std::string expected =
      ChunkSignature(signing_key_, amz_date_, scope_, previous_, chunk_sha256_hex);
  if (!ConstantTimeEquals(expected, signature)) return false;
  previous_ = std::move(expected);
  return true;
}

std::string TrailerSignature(std::string_view signing_key, std::string_view amz_date,
                             std::string_view scope, std::string_view final_chunk_signature,
                             std::string_view canonical_trailers) {
  return StreamingSignature(signing_key, "AWS4-HMAC-SHA256-TRAILER", amz_date, scope,
                            final_chunk_signature, ToHex(Sha256(canonical_trailers)));
}

bool ChunkSignatureChain::VerifyTrailer(std::string_view canonical_trailers,
                                        std::string_view signature) const {
  return ConstantTimeEquals(
      TrailerSignature(signing_key_, amz_date_, scope_, previous_, canonical_trailers), signature);
}

std::string SignRequest(SigningInput* in) {
  const std::string amz_date = AmzDate(in->time);
  in->headers.emplace_back("x-amz-date", amz_date);
  in->headers.emplace_back("x-amz-content-sha256", in->payload_hash);
  std::vector<std::string> names;
  for (auto& [k, v] : in->headers) {
    std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
    names.push_back(k);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string signed_headers;
  for (const std::string& n : names) signed_headers += (signed_headers.empty() ? "" : ";") + n;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + in->region + "/s3/aws4_request";
  auto canonical = CanonicalRequest(in->method, in->raw_path, in->query, false, in->headers,
                                    signed_headers, in->payload_hash);
  const std::string key = SigningKey(in->secret_key, date, in->region, "s3");
  const std::string signature =
      ToHex(HmacSha256(key, StringToSign(amz_date, scope, canonical->request)));
  return std::string(kAlgorithm) + " Credential=" + in->access_key + "/" + scope +
         ", SignedHeaders=" + signed_headers + ", Signature=" + signature;
}

}  // namespace objectcache::s3
