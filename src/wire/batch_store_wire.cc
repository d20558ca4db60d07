#include "wire/batch_store_wire.h"

#include <algorithm>

namespace objectcache::wire {

void PutBatchRecord(std::string_view key, std::string_view object, ByteWriter* w) {
  w->U32(kBatchRecordMagic);
  w->U32(static_cast<uint32_t>(key.size()));
  w->Bytes(key.data(), key.size());
  w->U64(object.size());
  w->Bytes(object.data(), object.size());
}

void PutBatchEnd(ByteWriter* w) { w->U32(kBatchEndMagic); }

Result<BatchStoreDecoder::Event> BatchStoreDecoder::Next(std::span<const std::byte>* in) {
  using Kind = Event::Kind;
  if (!failure_.ok()) return failure_;
  auto fail = [&](Status s) {
    failure_ = std::move(s);
    return failure_;
  };
  if (ended_) {
    if (!in->empty()) return fail(InvalidArgumentError("batch store: bytes after the end record"));
    return Event{};
  }
  if (object_left_ > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(object_left_, in->size()));
    if (k == 0) return Event{};
    Event e{.kind = Kind::kObjectBytes, .bytes = in->first(k)};
    *in = in->subspan(k);
    object_left_ -= k;
    return e;
  }
  while (!in->empty()) {
    const size_t k = std::min(head_need_ - head_.size(), in->size());
    head_.append(reinterpret_cast<const char*>(in->data()), k);
    *in = in->subspan(k);
    if (head_.size() < head_need_) break;
    ByteReader r(std::as_bytes(std::span(head_.data(), head_.size())));
    uint32_t magic = 0, key_len = 0;
    (void)r.U32(&magic);
    if (head_need_ == 4) {
      if (magic == kBatchEndMagic) {
        ended_ = true;
        head_.clear();
        if (!in->empty()) {
          return fail(InvalidArgumentError("batch store: bytes after the end record"));
        }
        return Event{.kind = Kind::kEnd};
      }
      if (magic != kBatchRecordMagic) {
        return fail(InvalidArgumentError("batch store: bad record magic"));
      }
      head_need_ = 8;  // the key length next
      continue;
    }
    (void)r.U32(&key_len);
    if (head_need_ == 8) {
      if (key_len == 0 || key_len > kMaxBatchKeyBytes) {
        return fail(OutOfRangeError("batch store: bad key length " + std::to_string(key_len)));
      }
      head_need_ = 8 + key_len + 8;  // then the key and the object size
      continue;
    }
    Event e{.kind = Kind::kRecord};
    e.key = head_.substr(8, key_len);
    ByteReader sr(std::as_bytes(std::span(head_.data(), head_.size())).subspan(8 + key_len));
    (void)sr.U64(&e.size);
    head_.clear();
    head_need_ = 4;
    if (records_ == kMaxBatchRecords) {
      return fail(InvalidArgumentError("batch store: more than " +
                                       std::to_string(kMaxBatchRecords) + " objects"));
    }
    records_++;
    object_left_ = e.size;
    return e;
  }
  return Event{};
}

}  // namespace objectcache::wire
