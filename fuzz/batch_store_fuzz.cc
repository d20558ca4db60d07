// The batch-store body decoder (src/wire): any byte stream, fed in pieces of sizes the input
// chooses, ends in events or an error; an object never yields more bytes than its record
// claimed, no record comes after the end marker, and never more than kMaxBatchRecords records.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "wire/batch_store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace objectcache;
  using Kind = wire::BatchStoreDecoder::Event::Kind;
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  wire::BatchStoreDecoder decoder;
  uint64_t object_left = 0;
  bool ended = false;
  std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  while (!rest.empty()) {
    std::span<const std::byte> in = rest.first(std::min(piece, rest.size()));
    rest = rest.subspan(in.size());
    while (!in.empty()) {
      Result<wire::BatchStoreDecoder::Event> e = decoder.Next(&in);
      if (!e) return 0;
      if (ended) std::abort();  // nothing but an error after the end marker
      if (e->kind == Kind::kRecord) {
        if (object_left != 0 || e->key.empty() || e->key.size() > wire::kMaxBatchKeyBytes) {
          std::abort();
        }
        object_left = e->size;
      } else if (e->kind == Kind::kObjectBytes) {
        if (e->bytes.empty() || e->bytes.size() > object_left) std::abort();
        object_left -= e->bytes.size();
      } else if (e->kind == Kind::kEnd) {
        if (object_left != 0) std::abort();
        ended = true;
      }
    }
  }
  if (decoder.complete() != ended || decoder.records() > wire::kMaxBatchRecords) std::abort();
  return 0;
}
