// The aws-chunked body decoder (streaming uploads): any body, in each of its forms, decodes to at
// most the declared length or fails.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "s3/aws_chunked.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache::s3;
  if (size < 2) return 0;
  const uint64_t declared = data[0] * 37u;
  const size_t piece = 1 + data[1] % 50;
  std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  SigV4Identity id;
  id.signing_key = std::string(32, 'k');
  id.amz_date = "20270101T000000Z";
  id.scope = "20270101/us-east-1/s3/aws4_request";
  id.signature = std::string(64, '0');
  // Unsigned, unsigned with a checksum trailer, signed, signed with signed trailers.
  for (int form = 0; form < 4; ++form) {
    std::optional<ChunkSignatureChain> chain;
    if (form >= 2) chain.emplace(id);
    std::optional<PayloadChecksum> trailer;
    if (form % 2 == 1) trailer = PayloadChecksum::ForHeader("x-amz-checksum-crc32");
    AwsChunkedDecoder decoder(std::move(chain), declared, std::move(trailer), form == 3);
    std::string out;
    bool ok = true;
    for (size_t at = 0; at < body.size() && ok; at += piece) {
      ok = decoder.Feed(body.subspan(at, std::min(piece, body.size() - at)), &out).has_value();
    }
    if (out.size() > declared) std::abort();
    if (ok) (void)decoder.Finish();
  }
  return 0;
}
