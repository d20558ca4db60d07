// The client's layerwise response decoder: any byte stream, fed in pieces of sizes the input
// chooses, pushed (Feed) or pulled (NextBuffer, then Commit, as a connection reading into place
// does) as the input chooses, ends in OK or an error; no layer is reported ready unless its frame
// checked out, and nothing is written outside the regions it was given.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/layer_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache;
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  const bool pull = (data[0] & 0x80) != 0;
  std::vector<std::string> regions;
  client::LayerStreamDecoder decoder(
      [&](const client::LayerStreamHeader& h) -> Result<client::LayerPlacement> {
        const uint64_t bytes = h.slice_bytes * h.hits;
        if (h.layer_count > 256 || h.slice_bytes > (1 << 20) || bytes > (4 << 20)) {
          return InvalidArgumentError("too large for the fuzzer");
        }
        client::LayerPlacement placement;
        regions.assign(h.layer_count, std::string(bytes, '\0'));
        for (std::string& r : regions) {
          placement.regions.push_back(std::as_writable_bytes(std::span(r.data(), r.size())));
        }
        return placement;
      },
      [&](uint32_t, const Status&) {});
  std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  while (!rest.empty()) {
    size_t n = std::min(piece, rest.size());
    if (pull) {
      const std::span<std::byte> room = decoder.NextBuffer();
      if (room.empty()) std::abort();  // the reader would spin
      n = std::min(n, room.size());
      std::copy_n(rest.begin(), n, room.begin());
      if (!decoder.Commit(n).ok()) return 0;
    } else if (!decoder.Feed(rest.first(n)).ok()) {
      return 0;
    }
    rest = rest.subspan(n);
  }
  (void)decoder.Finish();
  return 0;
}
