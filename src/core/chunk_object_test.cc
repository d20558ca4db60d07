#include "objectcache/chunk_object.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/seeded_data.h"

namespace objectcache {
namespace {

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

class ChunkObjectTest : public ::testing::Test {
 protected:
  // Small layout whose slice (2*2*8*2*... ) is not a multiple of 4 KiB, to exercise padding.
  KvLayout layout_{3, 2, 24, KvDtype::kFp16, 16};  // slice = 16*2*2*24*2 = 3072 bytes
  ChunkKey key_ = *ChunkKey::FromHex("00112233445566778899aabbccddeeff");
  std::string kv_ = SeededBytes(layout_.ChunkKvBytes(), 1);
  std::string object_ = *EncodeChunkObject(layout_, key_, AsBytes(kv_));
};

TEST_F(ChunkObjectTest, RoundTripsAndAlignsLayers) {
  ChunkHeader h = *VerifyChunkObject(AsBytes(object_));
  EXPECT_EQ(object_.size(), h.ObjectBytes());
  EXPECT_EQ(object_.size(), 4096u + 3 * 4096u);
  EXPECT_EQ(h.key, key_);
  EXPECT_EQ(h.layout, layout_);
  for (uint32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(h.LayerOffset(l) % kChunkAlignment, 0u);
    EXPECT_EQ(object_.substr(h.LayerOffset(l), h.LayerSliceBytes()),
              kv_.substr(l * h.LayerSliceBytes(), h.LayerSliceBytes()));
  }
  EXPECT_EQ(*DecodeChunkObject(AsBytes(object_)), kv_);
}

TEST_F(ChunkObjectTest, SealingInPlaceGivesTheEncodedObject) {
  const ChunkHeader g = ChunkGeometry(layout_, key_);
  std::string object(g.ObjectBytes(), '\x55');  // the header region is overwritten
  for (uint32_t l = 0; l < layout_.num_layers; ++l) {
    object.replace(g.LayerOffset(l), g.LayerSliceBytes(),
                   kv_.substr(l * g.LayerSliceBytes(), g.LayerSliceBytes()));
    std::fill_n(object.begin() + g.LayerOffset(l) + g.LayerSliceBytes(),
                g.layer_stride - g.LayerSliceBytes(), '\0');
  }
  std::span<std::byte> bytes(reinterpret_cast<std::byte*>(object.data()), object.size());
  ASSERT_TRUE(SealChunkObject(layout_, key_, bytes).ok());
  EXPECT_EQ(object, object_);
  EXPECT_EQ(SealChunkObject(layout_, key_, bytes.first(object.size() - 1)).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ChunkObjectTest, LatentLayoutsRoundTripAndAreNotKeyValueOnes) {
  KvLayout latent{2, 1, 576, KvDtype::kBf16, 16, KvKind::kLatent};
  EXPECT_EQ(latent.LayerSliceBytes(), 16u * 576 * 2);
  const std::string kv = SeededBytes(latent.ChunkKvBytes(), 2);
  const std::string object = *EncodeChunkObject(latent, key_, AsBytes(kv));
  EXPECT_EQ(VerifyChunkObject(AsBytes(object))->layout, latent);
  EXPECT_EQ(*DecodeChunkObject(AsBytes(object)), kv);
  KvLayout key_value = latent;
  key_value.kind = KvKind::kKeyValue;
  EXPECT_EQ(DecodeChunkHeader(AsBytes(object), {.layout = &key_value}).error().code(),
            StatusCode::kInvalidArgument);
  std::string unknown = object;  // the kind byte altered: never read as another layout
  unknown[29] = 7;
  EXPECT_FALSE(DecodeChunkHeader(AsBytes(unknown)).has_value());
}

TEST_F(ChunkObjectTest, LlamaChunkIsTwoMiBPlusHeader) {
  KvLayout l = FindModelPreset("llama-3.1-8b")->layout;
  ChunkHeader g = ChunkGeometry(l, key_);
  EXPECT_EQ(g.ObjectBytes(), (2u << 20) + 4096);
  EXPECT_EQ(g.LayerOffset(7), 4096u + 7 * (64u << 10));
}

TEST_F(ChunkObjectTest, HeaderAloneDecodesAndLayersVerifyAlone) {
  ChunkHeader h = *DecodeChunkHeader(AsBytes(object_).first(kChunkHeaderRegion));
  auto slice = AsBytes(object_).subspan(h.LayerOffset(2), h.LayerSliceBytes());
  EXPECT_TRUE(VerifyLayerSlice(h, 2, slice).ok());
  EXPECT_EQ(VerifyLayerSlice(h, 1, slice).code(), StatusCode::kDataLoss);
  EXPECT_EQ(VerifyLayerSlice(h, 3, slice).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyLayerSlice(h, 2, slice.first(100)).code(), StatusCode::kDataLoss);
}

TEST_F(ChunkObjectTest, WrongKvSizeIsInvalidArgument) {
  Result<std::string> r = EncodeChunkObject(layout_, key_, AsBytes(kv_).first(kv_.size() - 1));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkObjectTest, EveryTruncationIsDataLoss) {
  for (size_t n = 0; n < object_.size(); n += (n < 200 ? 1 : 97)) {
    Result<ChunkHeader> r = VerifyChunkObject(AsBytes(object_).first(n));
    ASSERT_FALSE(r.has_value()) << n;
    EXPECT_EQ(r.error().code(), StatusCode::kDataLoss) << n << " " << r.error().ToString();
  }
  std::string longer = object_ + "x";
  EXPECT_EQ(VerifyChunkObject(AsBytes(longer)).error().code(), StatusCode::kDataLoss);
}

TEST_F(ChunkObjectTest, EveryBitFlipIsDetected) {
  // Every bit of the header, and a sample of bits of each layer and the padding.
  std::mt19937 rng(7);
  std::vector<size_t> positions;
  for (size_t i = 0; i < 4096; ++i) positions.push_back(i);
  for (int i = 0; i < 2000; ++i) positions.push_back(4096 + rng() % (object_.size() - 4096));
  for (size_t pos : positions) {
    for (int bit : {0, 5}) {
      std::string damaged = object_;
      damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
      Result<ChunkHeader> r = VerifyChunkObject(AsBytes(damaged));
      ASSERT_FALSE(r.has_value()) << "flip at " << pos;
      StatusCode c = r.error().code();
      EXPECT_TRUE(c == StatusCode::kDataLoss || c == StatusCode::kInvalidArgument)
          << pos << " " << r.error().ToString();
    }
  }
}

TEST_F(ChunkObjectTest, WrongVersionAndForeignObjectsAreInvalidArgument) {
  std::string v2 = object_;
  v2[8] = 2;
  Result<ChunkHeader> r = DecodeChunkHeader(AsBytes(v2));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("version 2"), std::string::npos);

  std::string foreign = "PK\x03\x04 this is a zip file, not a chunk" + std::string(5000, 'z');
  EXPECT_EQ(DecodeChunkHeader(AsBytes(foreign)).error().code(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkObjectTest, ExpectationMismatchesAreInvalidArgument) {
  ChunkKey other = *ChunkKey::FromHex("ffffffffffffffffffffffffffffffff");
  ChunkExpectation want_other_key{.key = &other};
  EXPECT_EQ(DecodeChunkHeader(AsBytes(object_), want_other_key).error().code(),
            StatusCode::kInvalidArgument);
  KvLayout llama = FindModelPreset("llama-3.1-8b")->layout;
  ChunkExpectation want_llama{.layout = &llama};
  EXPECT_EQ(DecodeChunkHeader(AsBytes(object_), want_llama).error().code(),
            StatusCode::kInvalidArgument);
  ChunkExpectation wrong_size{.object_bytes = object_.size() - 4096};
  EXPECT_EQ(DecodeChunkHeader(AsBytes(object_), wrong_size).error().code(), StatusCode::kDataLoss);
}

TEST_F(ChunkObjectTest, StreamVerifierAcceptsTheObjectInAnyPieces) {
  for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}, size_t{5000}, object_.size()}) {
    ChunkStreamVerifier v({.layout = &layout_, .key = &key_});
    for (size_t off = 0; off < object_.size(); off += piece) {
      ASSERT_TRUE(v.Feed(AsBytes(object_).subspan(off, std::min(piece, object_.size() - off))).ok())
          << piece << " at " << off;
    }
    EXPECT_TRUE(v.Finish().ok()) << piece;
  }
}

TEST_F(ChunkObjectTest, StreamVerifierRejectsDamage) {
  auto run = [&](const std::string& obj, ChunkExpectation expect) {
    ChunkStreamVerifier v(expect);
    for (size_t off = 0; off < obj.size(); off += 1000) {
      Status s = v.Feed(AsBytes(obj).subspan(off, std::min<size_t>(1000, obj.size() - off)));
      if (!s.ok()) return s;
    }
    return v.Finish();
  };
  std::string flipped = object_;
  flipped[4096 + 4096 + 5] ^= 1;  // layer 1's data
  EXPECT_EQ(run(flipped, {}).code(), StatusCode::kDataLoss);
  std::string pad = object_;
  pad[4096 + 3072 + 100] = 1;  // the padding after layer 0
  EXPECT_EQ(run(pad, {}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(object_.substr(0, object_.size() - 1), {}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(object_ + "x", {}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(object_.substr(0, 100), {}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(run("GIF89a" + std::string(9000, 'x'), {}).code(), StatusCode::kInvalidArgument);
  ChunkKey other = *ChunkKey::FromHex("ffffffffffffffffffffffffffffffff");
  EXPECT_EQ(run(object_, {.key = &other}).code(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkObjectTest, RandomGarbageNeverDecodes) {
  for (uint32_t seed = 0; seed < 2000; ++seed) {
    std::string junk = SeededBytes(seed % 9000, seed);
    if (seed % 2 == 0 && junk.size() >= 8) junk.replace(0, 8, "OCKVCHNK");  // right magic only
    Result<ChunkHeader> r = VerifyChunkObject(AsBytes(junk));
    ASSERT_FALSE(r.has_value()) << seed;
  }
}

}  // namespace
}  // namespace objectcache
