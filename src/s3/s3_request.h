// An HTTP request as the S3 layer sees it: method, decoded path and query, lowercase headers,
// and the bucket and key after path-style or virtual-hosted-style addressing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3/s3_error.h"

namespace objectcache::s3 {

struct S3Request {
  std::string method;
  std::string raw_path;  // as received: percent-encoded, without the query
  std::vector<std::pair<std::string, std::string>> query;    // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers;  // lowercase names, in order
  std::string bucket;                                        // empty for the service (ListBuckets)
  std::string key;                                           // empty for a bucket request
  bool virtual_host = false;

  const std::string* Header(std::string_view name) const;
  const std::string* Query(std::string_view name) const;
  bool HasQuery(std::string_view name) const { return Query(name) != nullptr; }
  // The parameter's value; empty when it is absent.
  std::string QueryValue(std::string_view name) const {
    const std::string* v = Query(name);
    return v ? *v : std::string();
  }
};

// A whole string of decimal digits (no sign, no space, no trailing text) that fits in u64;
// false otherwise ("100junk", "1abc", "", "-1", 2^64).
bool ParseDecimal(std::string_view text, uint64_t* out);

// `value` without the spaces and tabs around it (HTTP's optional whitespace).
std::string_view TrimOws(std::string_view value);
// The items of a comma-separated header value (RFC 9110 5.6.1), each trimmed, empty ones kept
// ("a, ,b" is "a", "", "b"); none for an empty value.
std::vector<std::string_view> HeaderListItems(std::string_view value);

// Percent-decoding; false on a malformed escape.
bool PercentDecode(std::string_view in, std::string* out);
// Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what S3 object
// names must be (they appear in listings' XML).
bool IsValidUtf8(std::string_view s);
// AWS URI encoding: unreserved characters (A-Z a-z 0-9 - _ . ~) stay, everything else is %XX
// (uppercase); '/' stays when `keep_slash`.
std::string UriEncode(std::string_view in, bool keep_slash);

// Splits a request target ("/bucket/key?x=1") and resolves the bucket and key. A Host ending in
// ".<domain>" for one of `virtual_host_domains` names the bucket (virtual-hosted style);
// otherwise the first path segment does (path style). A request with two Host headers, or two
// Transfer-Encoding headers, is InvalidRequest; one whose Transfer-Encoding is not `chunked`
// alone is NotImplemented (501), as S3 answers it.
S3Result<S3Request> ParseS3Request(std::string_view method, std::string_view target,
                                   std::vector<std::pair<std::string, std::string>> headers,
                                   const std::vector<std::string>& virtual_host_domains);

}  // namespace objectcache::s3
