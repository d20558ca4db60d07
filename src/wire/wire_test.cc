// Round trips of every record of docs/wire-format.md through its encoder and decoder, with the
// byte layout pinned by hand-written vectors, and the decoders' answers to malformed input.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "wire/batch_store_wire.h"
#include "wire/layerwise_wire.h"
#include "wire/lookup_wire.h"

namespace objectcache::wire {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string Hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

TEST(LayerwiseWireTest, ResponseHeaderBytesAreTheDocumentedOnes) {
  ByteWriter w;
  PutResponseHeader(
      {.hits = 3, .first_layer = 2, .layer_count = 30, .slice_bytes = 65536, .keys = 5}, &w);
  EXPECT_EQ(Hex(w.str()),
            "4f434c5752535031"  // magic OCLWRSP1
            "0100"              // version 1
            "0000"              // flags
            "03000000"          // hits
            "02000000"          // first layer
            "1e000000"          // layer count
            "0000010000000000"  // slice bytes
            "05000000"          // keys
            "00000000");        // reserved
}

TEST(LayerwiseWireTest, ResponseHeaderRoundTripsOverTheWholeDomain) {
  for (const ResponseHeader& h :
       {ResponseHeader{.hits = 0, .first_layer = 0, .layer_count = 1, .slice_bytes = 1, .keys = 0},
        ResponseHeader{.hits = UINT32_MAX,
        .first_layer = UINT32_MAX,
        .layer_count = UINT32_MAX,
        .slice_bytes = UINT64_MAX,
        .keys = UINT32_MAX}}) {
    ByteWriter w;
    PutResponseHeader(h, &w);
    ASSERT_EQ(w.size(), kResponseHeaderBytes);
    Result<ResponseHeader> back = ParseResponseHeader(Bytes(w.str()));
    ASSERT_TRUE(back.has_value()) << back.error().ToString();
    EXPECT_EQ(back->hits, h.hits);
    EXPECT_EQ(back->first_layer, h.first_layer);
    EXPECT_EQ(back->layer_count, h.layer_count);
    EXPECT_EQ(back->slice_bytes, h.slice_bytes);
    EXPECT_EQ(back->keys, h.keys);
  }
}

TEST(LayerwiseWireTest, ResponseHeaderRejectsWhatTheFormatDoesNotAllow) {
  auto parse = [](const std::function<void(std::string&)>& damage) {
    ByteWriter w;
    PutResponseHeader({.hits = 2, .first_layer = 0, .layer_count = 4, .slice_bytes = 8, .keys = 3},
                      &w);
    std::string s = w.str();
    damage(s);
    return ParseResponseHeader(Bytes(s));
  };
  EXPECT_TRUE(parse([](std::string&) {}).has_value());
  EXPECT_EQ(parse([](std::string& s) { s[0] = 'X'; }).error().code(), StatusCode::kDataLoss);
  EXPECT_EQ(parse([](std::string& s) { s[8] = 3; }).error().code(),
            StatusCode::kInvalidArgument);  // version 2
  EXPECT_EQ(parse([](std::string& s) { s[12] = 9; }).error().code(),
            StatusCode::kDataLoss);  // hits 9 > keys 3
  EXPECT_EQ(parse([](std::string& s) { s[20] = 0; }).error().code(),
            StatusCode::kDataLoss);  // no layers
  EXPECT_EQ(parse([](std::string& s) { s[24] = 0; }).error().code(),
            StatusCode::kDataLoss);  // no slice bytes
  EXPECT_EQ(parse([](std::string& s) { s.pop_back(); }).error().code(), StatusCode::kDataLoss);
}

TEST(LayerwiseWireTest, FrameRecordsRoundTrip) {
  ByteWriter w;
  PutFrameHeader({.layer = UINT32_MAX, .chunks = 7, .payload_bytes = UINT64_MAX}, &w);
  ASSERT_EQ(w.size(), kFrameHeaderBytes);
  EXPECT_EQ(Hex(w.str()).substr(0, 8), "4f434c46");  // OCLF
  EXPECT_EQ(KindOfRecord(Bytes(w.str()).first(kRecordMagicBytes)), RecordKind::kFrame);
  Result<FrameHeader> f = ParseFrameHeader(Bytes(w.str()));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->layer, UINT32_MAX);
  EXPECT_EQ(f->chunks, 7u);
  EXPECT_EQ(f->payload_bytes, UINT64_MAX);

  ByteWriter t;
  PutFrameTrailer({.status = 15, .checksum = 0x0123456789abcdefULL}, &t);
  EXPECT_EQ(Hex(t.str()), "0f00000000000000efcdab8967452301");
  Result<FrameTrailer> back = ParseFrameTrailer(Bytes(t.str()));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->status, 15u);
  EXPECT_EQ(back->checksum, 0x0123456789abcdefULL);

  EXPECT_FALSE(ParseFrameHeader(Bytes(t.str() + t.str().substr(0, 8))).has_value());  // no magic
  EXPECT_FALSE(ParseFrameTrailer(Bytes(t.str().substr(1))).has_value());
}

TEST(LayerwiseWireTest, ErrorRecordRoundTripsAndBoundsItsMessage) {
  ByteWriter w;
  PutErrorRecord(15, "DataLoss: chunk 3fa2: checksum mismatch in layer 5", &w);
  EXPECT_EQ(KindOfRecord(Bytes(w.str()).first(kRecordMagicBytes)), RecordKind::kError);
  Result<ErrorRecordHead> e = ParseErrorRecordHead(Bytes(w.str()).first(kErrorRecordBytes));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 15u);
  EXPECT_EQ(w.str().substr(kErrorRecordBytes, e->message_bytes),
            "DataLoss: chunk 3fa2: checksum mismatch in layer 5");

  ByteWriter longer;
  PutErrorRecord(13, std::string(kMaxErrorMessage + 100, 'x'), &longer);
  EXPECT_EQ(longer.size(), kErrorRecordBytes + kMaxErrorMessage);  // cut to the bound
  std::string head = longer.str().substr(0, kErrorRecordBytes);
  head[9] = 0x7f;  // a claimed message of ~8 MiB
  EXPECT_EQ(ParseErrorRecordHead(Bytes(head)).error().code(), StatusCode::kDataLoss);
  EXPECT_EQ(KindOfRecord(Bytes(std::string("OCLX"))), RecordKind::kOther);
  EXPECT_EQ(KindOfRecord(Bytes(std::string("OC"))), RecordKind::kOther);
}

// Feeds `body` to a decoder in pieces of random sizes; the records found, or the error.
struct Decoded {
  std::vector<std::pair<std::string, std::string>> records;
  bool ended = false;
  Status error;
};

Decoded DecodeInPieces(const std::string& body, uint32_t seed) {
  std::mt19937 rng(seed);
  BatchStoreDecoder d;
  Decoded out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 97, body.size() - pos);
    std::span<const std::byte> in = Bytes(body).subspan(pos, n);
    pos += n;
    while (!in.empty()) {
      Result<BatchStoreDecoder::Event> e = d.Next(&in);
      if (!e) {
        out.error = e.error();
        return out;
      }
      using Kind = BatchStoreDecoder::Event::Kind;
      if (e->kind == Kind::kRecord) {
        out.records.emplace_back(e->key, "");
        out.records.back().second.reserve(e->size);
      } else if (e->kind == Kind::kObjectBytes) {
        out.records.back().second.append(reinterpret_cast<const char*>(e->bytes.data()),
                                         e->bytes.size());
      } else if (e->kind == Kind::kEnd) {
        out.ended = true;
      }
    }
  }
  EXPECT_EQ(out.ended, d.complete());
  return out;
}

TEST(BatchStoreWireTest, RecordsRoundTripInPiecesOfAnySize) {
  std::vector<std::pair<std::string, std::string>> objects = {
      {"6d0f5c5d66016c150b2cafada81c8810", std::string(5000, 'a')},
      {"k", ""},
      {std::string(kMaxBatchKeyBytes, 'z'), "hello"}};
  ByteWriter w;
  for (const auto& [k, v] : objects) PutBatchRecord(k, v, &w);
  PutBatchEnd(&w);
  EXPECT_EQ(Hex(w.str()).substr(0, 16), "4f43425020000000");            // OCBP, key length 32
  EXPECT_EQ(Hex(w.str()).substr(Hex(w.str()).size() - 8), "4f434245");  // OCBE
  for (uint32_t seed = 0; seed < 20; ++seed) {
    Decoded d = DecodeInPieces(w.str(), seed);
    ASSERT_TRUE(d.error.ok()) << d.error.ToString();
    EXPECT_TRUE(d.ended);
    EXPECT_EQ(d.records, objects);
  }
}

TEST(BatchStoreWireTest, MalformedBodiesFailWithTheirReason) {
  auto body = [](const std::function<void(ByteWriter*)>& f) {
    ByteWriter w;
    f(&w);
    return w.str();
  };
  const std::string good = body([](ByteWriter* w) {
    PutBatchRecord("key", "value", w);
    PutBatchEnd(w);
  });
  EXPECT_TRUE(DecodeInPieces(good, 1).error.ok());
  // Cut anywhere: no error, but no end either (the server answers IncompleteBody).
  for (size_t cut = 0; cut < good.size(); ++cut) {
    Decoded d = DecodeInPieces(good.substr(0, cut), 2);
    EXPECT_TRUE(d.error.ok());
    EXPECT_FALSE(d.ended) << cut;
  }
  EXPECT_EQ(DecodeInPieces(good + "x", 3).error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeInPieces("XXXX" + good, 4).error.code(), StatusCode::kInvalidArgument);
  const std::string no_key = body([](ByteWriter* w) {
    w->U32(kBatchRecordMagic);
    w->U32(0);
  });
  EXPECT_EQ(DecodeInPieces(no_key, 5).error.code(), StatusCode::kOutOfRange);
  const std::string long_key = body([](ByteWriter* w) {
    w->U32(kBatchRecordMagic);
    w->U32(kMaxBatchKeyBytes + 1);
  });
  EXPECT_EQ(DecodeInPieces(long_key, 6).error.code(), StatusCode::kOutOfRange);
  const std::string huge_key = body([](ByteWriter* w) {
    w->U32(kBatchRecordMagic);
    w->U32(UINT32_MAX);
  });
  EXPECT_EQ(DecodeInPieces(huge_key, 7).error.code(), StatusCode::kOutOfRange);
  // A claimed object of u64 max: the decoder allocates nothing for it and waits for its bytes.
  const std::string huge_object = body([](ByteWriter* w) {
    w->U32(kBatchRecordMagic);
    w->U32(1);
    w->Bytes("k", 1);
    w->U64(UINT64_MAX);
    w->Bytes("abc", 3);
  });
  BatchStoreDecoder d;
  std::span<const std::byte> in = Bytes(huge_object);
  Result<BatchStoreDecoder::Event> e = d.Next(&in);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->size, UINT64_MAX);
  e = d.Next(&in);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->bytes.size(), 3u);
  EXPECT_FALSE(d.complete());
  const std::string too_many = body([](ByteWriter* w) {
    for (size_t i = 0; i <= kMaxBatchRecords; ++i) PutBatchRecord("k", "", w);
    PutBatchEnd(w);
  });
  Decoded many = DecodeInPieces(too_many, 8);
  EXPECT_EQ(many.error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(many.records.size(), kMaxBatchRecords);
}

TEST(LookupWireTest, ChunkKeysRoundTripAndOnlyWholeKeysWithinTheBoundParse) {
  std::vector<ChunkKey> keys;
  for (uint8_t i = 0; i < 5; ++i) {
    ChunkKey::Bytes b{};
    for (size_t j = 0; j < b.size(); ++j) b[j] = static_cast<uint8_t>(i * 16 + j);
    keys.emplace_back(b);
  }
  const std::string body = PutChunkKeys(keys);
  ASSERT_EQ(body.size(), 5 * ChunkKey::kBytes);
  EXPECT_EQ(static_cast<uint8_t>(body[16]), 16);  // key 1's first byte, as it is
  Result<std::vector<ChunkKey>> back = ParseChunkKeys(Bytes(body), 5);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, keys);
  EXPECT_EQ(ParseChunkKeys(Bytes(body), 4).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseChunkKeys(Bytes(body.substr(0, 17)), 5).error().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseChunkKeys(Bytes(std::string()), 5).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace objectcache::wire
