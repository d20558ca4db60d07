// The chunk object decoder and verifiers (docs/object-format.md): any bytes, with and without
// an expected layout and key, whole or streamed in pieces; OK only for a valid object.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "objectcache/chunk_object.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache;
  static const ModelPreset model = [] {
    ModelPreset m = *FindModelPreset("llama-3.1-8b");
    m.layout.num_layers = 2;  // small objects, so that the fuzzer can build whole ones
    m.layout.num_kv_heads = 1;
    m.layout.head_dim = 8;
    m.layout.tokens_per_chunk = 2;
    return m;
  }();
  static const ChunkKey key = *ChunkKey::FromHex("0123456789abcdef0123456789abcdef");
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const ChunkExpectation none;
  const ChunkExpectation expect{.layout = &model.layout, .key = &key, .object_bytes = size};
  for (const ChunkExpectation* e : {&none, &expect}) {
    (void)DecodeChunkHeader(bytes, *e);
    auto whole = VerifyChunkObject(bytes, *e);
    auto decoded = DecodeChunkObject(bytes, *e);
    if (whole.has_value() != decoded.has_value()) std::abort();  // one verdict
    ChunkStreamVerifier streamed(*e);
    bool ok = true;
    for (size_t at = 0; at < size && ok;) {
      const size_t n = std::min<size_t>(size - at, 1 + (data[at] % 97));
      ok = streamed.Feed(bytes.subspan(at, n)).ok();
      at += n;
    }
    if (ok) ok = streamed.Finish().ok();
    if (ok != whole.has_value()) std::abort();  // streaming and whole agree
  }
  return 0;
}
