// SigV4 and SigV2 parsing and verification: a request (method line, target line, then
// "name: value" header lines) through ParseS3Request, VerifySigV4 and VerifySigV2, against one
// known credential at a fixed time. Whatever the input, the answer is an S3 error or an identity,
// never a crash.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3/s3_request.h"
#include "s3/sigv2.h"
#include "s3/sigv4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache::s3;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> lines;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    lines.push_back(in.substr(0, nl));
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  }
  if (lines.size() < 2) return 0;
  std::vector<std::pair<std::string, std::string>> headers;
  for (size_t i = 2; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(lines[i].substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = lines[i].substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    headers.emplace_back(std::move(name), std::string(value));
  }
  auto request = ParseS3Request(lines[0], lines[1], std::move(headers), {"localhost"});
  if (!request) return 0;
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  (void)IsSigned(*request);
  (void)VerifySigV4(
      *request,
      [&](std::string_view access) { return access == "AKIDEXAMPLE" ? &secret : nullptr; },
      1798761600 /* 2027-01-01 */, "us-east-1");
  if (IsSigV2(*request)) {
    (void)SigV2StringToSign(*request, "Fri, 01 Jan 2027 00:00:00 GMT");
    (void)VerifySigV2(
        *request,
        [&](std::string_view access) { return access == "AKIDEXAMPLE" ? &secret : nullptr; },
        1798761600);
  }
  return 0;
}
