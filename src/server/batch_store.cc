// Batch store (docs/wire-format.md): one request stores many objects, the engine saving a
// prefix after prefill. Records stream through writers; nothing is committed until the whole
// body has arrived and its signature and checksums are verified, so a bad request stores nothing;
// a commit that fails halfway removes what the request had committed (all or nothing).
#include <nlohmann/json.hpp>

#include "objectcache/chunk_object.h"
#include "s3/crypto.h"
#include "server/s3_handler.h"
#include "wire/batch_store_wire.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

asio::awaitable<S3Result<void>> S3Handler::BatchStore(Ctx& c) {
  const std::string payload_hash =
      c.id ? c.id->payload_hash
           : (c.req.Header("x-amz-content-sha256") ? *c.req.Header("x-amz-content-sha256")
                                                   : std::string(kUnsignedPayload));
  if (payload_hash != kUnsignedPayload && payload_hash.size() != 64) {
    co_return Fail("InvalidArgument", "batch store takes a hex or unsigned payload hash");
  }
  Digest sha(Digest::Kind::kSha256);
  struct Pending {
    std::string key;
    std::unique_ptr<ObjectWriter> writer;
    Digest md5{Digest::Kind::kMd5};
    std::optional<ChunkStreamVerifier> verifier;
  };
  // One of the budget a record, until the request ends (after its writers: declared before).
  MemoryBudget::Lease open_objects = open_batch_objects_.NewLease();
  std::vector<std::unique_ptr<Pending>> records;
  wire::BatchStoreDecoder decoder;
  MemoryBudget::Lease lease = memory_.NewLease();
  if (!lease.GrowTo(options_.io_buffer_bytes)) co_return MemoryBudgetExhausted();
  IoBuffer raw(options_.io_buffer_bytes);
  for (;;) {
    Result<size_t> n = co_await c.ex.ReadBody(raw.span());
    if (!n) co_return Fail("IncompleteBody", n.error().message());
    if (*n == 0) break;
    std::span<const std::byte> in = std::span<const std::byte>(raw.span().first(*n));
    sha.Update(in);
    while (!in.empty()) {
      Result<wire::BatchStoreDecoder::Event> e = decoder.Next(&in);
      if (!e) {
        co_return Fail(
            e.error().code() == StatusCode::kOutOfRange ? "KeyTooLongError" : "InvalidArgument",
            e.error().message());
      }
      using Kind = wire::BatchStoreDecoder::Event::Kind;
      if (e->kind == Kind::kObjectBytes) {
        Pending* cur = records.back().get();
        cur->md5.Update(e->bytes);
        if (cur->verifier) {
          if (Status s = cur->verifier->Feed(e->bytes); !s.ok())
            co_return Fail("InvalidChunkObject", s.ToString());
        }
        Status s = co_await Blocking([&] { return cur->writer->Append(e->bytes); });
        if (!s.ok()) co_return std::unexpected(FromStatus(s));
        continue;
      }
      if (e->kind != Kind::kRecord) continue;
      if (!IsValidUtf8(e->key))
        co_return Fail("InvalidArgument", "batch store: a key is not UTF-8");
      if (!open_objects.GrowTo(records.size() + 1)) {
        co_return Fail("SlowDown",
                       "batch store: this tenant's unfinished batch stores hold the most objects "
                       "open it may (--max-open-batch-objects); retry later");
      }
      auto p = std::make_unique<Pending>();
      p->key = e->key;
      if (c.bucket.layout) {
        Result<ChunkKey> ck = ChunkKey::FromHex(p->key);
        if (!ck) co_return Fail("InvalidChunkObject", "'" + p->key + "' is not a chunk key");
        p->verifier.emplace(ChunkExpectation{
            .layout = &c.bucket.layout->layout, .key = &*ck, .object_bytes = e->size});
      }
      auto w =
          co_await Blocking([&] { return store_->NewWriter(ObjectKey(c.req.bucket, p->key)); });
      if (!w) co_return std::unexpected(FromStatus(w.error()));
      p->writer = std::move(*w);
      records.push_back(std::move(p));
    }
  }
  if (!decoder.complete()) {  // the end marker comes only after the last object's bytes
    co_return Fail("IncompleteBody", "batch store: body ends inside a record");
  }
  if (payload_hash != kUnsignedPayload && ToHex(sha.Finish()) != payload_hash) {
    co_return Fail("XAmzContentSHA256Mismatch",
                   "The provided 'x-amz-content-sha256' header does not match what was computed.");
  }
  // Everything checked: commit, in request order.
  nlohmann::json stored = nlohmann::json::array();
  for (auto& p : records) {
    if (p->verifier) {
      if (Status s = p->verifier->Finish(); !s.ok())
        co_return Fail("InvalidChunkObject", s.ToString());
    }
  }
  for (auto& p : records) {
    ObjectAttributes attrs;
    attrs.etag = ToHex(p->md5.Finish());
    if (Status s = p->writer->SetAttributes(attrs.Encode()); !s.ok()) {
      co_return std::unexpected(FromStatus(s));
    }
    stored.push_back({{"key", p->key}, {"etag", attrs.etag}});
  }
  // Commits one by one (each atomic); if one fails, those already committed by this request are
  // removed again, so the batch leaves all of its objects or none (an object it replaced is
  // then absent: a miss, never a mix of versions).
  Status committed = co_await Blocking([&]() -> Status {
    for (size_t i = 0; i < records.size(); ++i) {
      Status s = records[i]->writer->Commit();
      if (s.ok()) continue;
      for (size_t k = 0; k < i; ++k) {
        (void)store_->Delete(ObjectKey(c.req.bucket, records[k]->key));
      }
      return s.Annotate("batch store: committing '" + records[i]->key + "' (" + std::to_string(i) +
                        " committed objects removed again)");
    }
    return Status();
  });
  if (!committed.ok()) co_return std::unexpected(FromStatus(committed));
  // The objects are given back before the answer goes out: a client that sends its next batch
  // store on the answer finds them free (they were held until the handler returned).
  records.clear();
  open_objects.ShrinkTo(0);
  nlohmann::json out;
  out["stored"] = stored;
  co_return co_await ReplyJson(c, out.dump());
}

}  // namespace objectcache::server
