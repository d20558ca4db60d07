// The batch-store body (docs/wire-format.md, "Batch store"): records of (object name, size,
// object bytes), then an end marker. The client writes it (PutBatchRecord, PutBatchEnd); the
// server reads it as it arrives with BatchStoreDecoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/byte_order.h"
#include "objectcache/status.h"

namespace objectcache::wire {

inline constexpr uint32_t kBatchRecordMagic = 0x5042434f;  // "OCBP" little-endian
inline constexpr uint32_t kBatchEndMagic = 0x4542434f;     // "OCBE"
inline constexpr size_t kMaxBatchRecords = 8192;
inline constexpr size_t kMaxBatchKeyBytes = 1024;

// One record: its head, then `object`.
void PutBatchRecord(std::string_view key, std::string_view object, ByteWriter* w);
void PutBatchEnd(ByteWriter* w);

// A pull parser over a body arriving in pieces of any size. Next() consumes from the front of
// the piece it is given and says what it found; the caller handles it and calls again until
// the piece is empty. Errors are final: InvalidArgument for bad framing, bytes after the end or
// more than kMaxBatchRecords records; OutOfRange for a key length of 0 or above
// kMaxBatchKeyBytes. Object sizes are the sender's claim (any u64): the caller bounds what it
// allocates; the decoder allocates only the key (at most kMaxBatchKeyBytes).
class BatchStoreDecoder {
 public:
  struct Event {
    enum class Kind {
      kNeedMore,     // the piece is used up inside a record head
      kRecord,       // a record begins: `key` and `size`; its object's bytes follow as kObjectBytes
      kObjectBytes,  // `bytes`: the next bytes of the current record's object
      kEnd,          // the end marker
    };
    Kind kind = Kind::kNeedMore;
    std::string key;
    uint64_t size = 0;
    std::span<const std::byte> bytes;
  };

  Result<Event> Next(std::span<const std::byte>* in);
  // True once the end marker came (nothing may follow it); a body that ends without it is cut.
  bool complete() const { return ended_; }
  size_t records() const { return records_; }

 private:
  std::string head_;          // the record head being assembled
  size_t head_need_ = 4;      // its length as known so far: magic, + key length, + key and size
  uint64_t object_left_ = 0;  // bytes of the current object still to come
  size_t records_ = 0;
  bool ended_ = false;
  Status failure_;
};

}  // namespace objectcache::wire
