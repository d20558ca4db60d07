// Query strings, percent-encoding and the XML parser of S3 request bodies. Properties: decoding
// what UriEncode produced gives the input back; the parser returns a tree or an error.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/query_string.h"
#include "s3/s3_request.h"
#include "s3/xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)ForEachQueryPair(in, [](std::string_view k, std::optional<std::string_view> v) {
    std::string out;
    (void)s3::PercentDecode(k, &out);
    if (v) (void)s3::PercentDecode(*v, &out);
    return Status();
  });
  for (bool keep_slash : {false, true}) {
    std::string back;
    if (!s3::PercentDecode(s3::UriEncode(in, keep_slash), &back) || back != in) std::abort();
  }
  (void)s3::IsValidUtf8(in);
  s3::XmlElement root;
  std::string error;
  (void)s3::ParseXml(in, &root, &error);
  return 0;
}
