// The layerwise request descriptor (docs/wire-format.md): any body is a request or an S3 error.
#include <cstdint>
#include <string_view>

#include "server/s3_handler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)objectcache::server::CheckLayerwiseRequestBody(
      std::string_view(reinterpret_cast<const char*>(data), size), 8192);
  return 0;
}
