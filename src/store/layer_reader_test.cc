#include "objectcache/layer_reader.h"

#include <gtest/gtest.h>

#include <random>

#include "core/seeded_data.h"
#include "objectcache/chunk_object.h"
#include "store/memory/memory_store.h"

namespace objectcache {
namespace {

class LayerReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(3);
    keys_ = KeyNamespace("tiny", layout_).KeysForTokens(RandomTokens(rng, 16 * 5));
    for (const ChunkKey& k : keys_) {
      std::string kv = RandomBytes(rng, layout_.ChunkKvBytes());
      kv_.push_back(kv);
      ASSERT_TRUE(
          store_->Put(k.ToHex(), AsBytes(*EncodeChunkObject(layout_, k, AsBytes(kv)))).ok());
    }
  }

  Result<std::string> Read(LayerRange range, std::span<const ChunkKey> keys) {
    std::string out;
    uint32_t expect_layer = range.first;
    Status s = ReadLayersLayerMajor(
        *store_, layout_, keys, range, [&](uint32_t layer, std::span<const std::byte> bytes) {
          EXPECT_EQ(layer, expect_layer++);
          out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          return Status();
        });
    if (!s.ok()) return s;
    return out;
  }

  KvLayout layout_{6, 2, 32, KvDtype::kBf16, 16};  // 4 KiB slices
  std::unique_ptr<Store> store_ = NewMemoryStore();
  std::vector<ChunkKey> keys_;
  std::vector<std::string> kv_;
};

TEST_F(LayerReaderTest, ReturnsExactlyTheLayerMajorBytes) {
  const uint64_t slice = layout_.LayerSliceBytes();
  std::string want;
  for (uint32_t l = 2; l < 5; ++l) {
    for (size_t i = 0; i < keys_.size(); ++i) want += kv_[i].substr(l * slice, slice);
  }
  Result<std::string> got = Read({2, 5}, keys_);
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ(*got, want);
}

TEST_F(LayerReaderTest, MissingChunkIsNotFoundNamingIt) {
  ASSERT_TRUE(store_->Delete(keys_[3].ToHex()).ok());
  Result<std::string> got = Read({0, 6}, keys_);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code(), StatusCode::kNotFound);
  EXPECT_NE(got.error().message().find(keys_[3].ToHex()), std::string::npos);
}

TEST_F(LayerReaderTest, CorruptSliceIsDataLossAndNotHandedOver) {
  std::string obj = *ReadWholeObject(*store_, keys_[1].ToHex());
  obj[kChunkHeaderRegion + 3 * layout_.LayerSliceBytes() + 17] ^= 1;  // layer 3
  ASSERT_TRUE(store_->Put(keys_[1].ToHex(), AsBytes(obj)).ok());
  std::vector<uint32_t> handed;
  Status s = ReadLayersLayerMajor(*store_, layout_, keys_, {0, 6},
                                  [&](uint32_t layer, std::span<const std::byte>) {
                                    handed.push_back(layer);
                                    return Status();
                                  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(handed, (std::vector<uint32_t>{0, 1, 2}));
}

TEST_F(LayerReaderTest, WrongLayoutAndWrongObjectAreInvalidArgument) {
  KvLayout other = layout_;
  other.dtype = KvDtype::kFp16;
  Status s = ReadLayersLayerMajor(*store_, other, keys_, {0, 1},
                                  [](uint32_t, std::span<const std::byte>) { return Status(); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // Chunk 0's object stored under chunk 1's name.
  ASSERT_TRUE(
      store_->Put(keys_[1].ToHex(), AsBytes(*ReadWholeObject(*store_, keys_[0].ToHex()))).ok());
  EXPECT_EQ(Read({0, 1}, keys_).error().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->Put(keys_[2].ToHex(), AsBytes("short")).ok());
  EXPECT_EQ(Read({0, 1}, std::span(keys_).subspan(2)).error().code(), StatusCode::kDataLoss);
}

TEST_F(LayerReaderTest, LayerRangeParsing) {
  EXPECT_EQ(LayerRange::Parse("0:32", 32)->last, 32u);
  EXPECT_EQ(LayerRange::Parse("5:6", 32)->first, 5u);
  for (const char* bad : {"", "3", "3:", ":3", "4:4", "5:3", "0:33", "a:b", "-1:3", "1:2:3"}) {
    Result<LayerRange> r = LayerRange::Parse(bad, 32);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace objectcache
