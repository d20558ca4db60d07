// KV into and out of paged "device" memory (include/objectcache/device_kv.h) against a real
// `objectcache serve`, on the emulated device (copies delayed on purpose, so a layer reported
// before its copy completed would be caught), in each paged layout the engines use.
#include "objectcache/device_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "core/seeded_data.h"
#include "objectcache/chunk_object.h"
#include "s3/s3_connection.h"
#include "store/scratch_dir.h"
#include "test/server_process.h"

namespace objectcache {
namespace {

namespace fs = std::filesystem;
using device::DevicePtr;
using namespace std::chrono_literals;

constexpr std::byte kUntouched{0xEE};

enum class Shape { kFlashAttn, kFlashInfer, kHnd, kLatent };

struct Case {
  const char* name;
  Shape shape;
  uint32_t block_size;
};

// The byte offset of one vector in a layer tensor of `shape`, by the tensor's own indexing
// (independent of PagedKvLayout's strides).
uint64_t VectorOffset(Shape shape, const KvLayout& kv, uint64_t blocks, uint32_t block_size,
                      uint32_t kind, uint64_t block, uint32_t token, uint32_t head) {
  const uint64_t h = kv.num_kv_heads, n = block_size;
  const uint64_t vec = uint64_t{kv.head_dim} * KvDtypeBytes(kv.dtype);
  switch (shape) {
    case Shape::kFlashAttn:  // (2, B, N, H, D)
      return (((kind * blocks + block) * n + token) * h + head) * vec;
    case Shape::kFlashInfer:  // (B, 2, N, H, D)
      return (((block * 2 + kind) * n + token) * h + head) * vec;
    case Shape::kHnd:  // (B, 2, H, N, D)
      return (((block * 2 + kind) * h + head) * n + token) * vec;
    case Shape::kLatent:  // (B, N, C)
      return (block * n + token) * vec;
  }
  return 0;
}

class DeviceKvTest : public ::testing::TestWithParam<Case> {
 protected:
  static constexpr uint64_t kBlocks = 40;
  static constexpr size_t kStored = 5;  // chunks cached; requests ask for one more

  void SetUp() override {
    const bool latent = GetParam().shape == Shape::kLatent;
    model_ = *ParseModelJson(
        latent ? R"({"name": "tiny-mla", "layers": 6, "kv_heads": 1, "head_dim": 576,
                     "dtype": "bf16", "kv": "latent"})"
               : R"({"name": "tiny-kv", "layers": 6, "kv_heads": 2, "head_dim": 64,
                     "dtype": "bf16"})");
    const KvLayout& kv = model_.layout;
    const uint32_t bs = GetParam().block_size;
    switch (GetParam().shape) {
      case Shape::kFlashAttn:
        paged_ = PagedKvLayout::FlashAttn(kv, kBlocks, bs);
        break;
      case Shape::kFlashInfer:
        paged_ = PagedKvLayout::FlashInfer(kv, kBlocks, bs);
        break;
      case Shape::kHnd:
        paged_ = PagedKvLayout::FlashInferHnd(kv, kBlocks, bs);
        break;
      case Shape::kLatent:
        paged_ = PagedKvLayout::Latent(kv, kBlocks, bs);
        break;
    }
    dir_ = MakeScratchDir();
    server_ = std::make_unique<testing::ServerProcess>(dir_);
    ASSERT_GT(server_->port(), 0);
    const std::string endpoint = "http://127.0.0.1:" + std::to_string(server_->port());
    s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint), s3::S3Credentials{});
    Result<s3::S3Response> res = testing::PutBucket(conn, "kvc", ModelToJson(model_));
    ASSERT_TRUE(res.has_value() && res->status == 200u);
    // Three connections, each a stripe of the keys delivering layers at its own pace into the
    // one staging ring (a 16-core machine's default).
    client_ = *Client::Create({.endpoints = {endpoint}, .bucket = "kvc", .aggregated_streams = 3});
    // OBJECTCACHE_TEST_DEVICE=cuda:0 runs the same tests on a GPU (scripts/gpu-check).
    if (const char* spec = std::getenv("OBJECTCACHE_TEST_DEVICE")) {
      Result<std::shared_ptr<device::Device>> d = device::OpenDevice(spec);
      ASSERT_TRUE(d.has_value()) << d.error().ToString();
      device_ = *d;
    } else {
      device_ = device::NewEmulatedDevice({.copy_delay = 1ms});
    }

    std::mt19937_64 rng(GetParam().block_size * 7 + static_cast<int>(GetParam().shape));
    keys_ = KeyNamespace(model_.name, kv)
                .KeysForTokens(RandomTokens(rng, kv.tokens_per_chunk * (kStored + 1)));
    for (size_t i = 0; i < keys_.size(); ++i) {
      std::string bytes = RandomBytes(rng, kv.ChunkKvBytes());
      kv_.push_back(bytes);
      if (i < kStored)
        client_->StoreAsync(keys_[i], *EncodeChunkObject(kv, keys_[i], AsBytes(bytes)));
    }
    client_->Flush();
    ASSERT_EQ(client_->Stats().stored, kStored);
    ChooseBlocks();
  }

  // The request's blocks: a shuffled choice, so chunks seldom sit in neighbouring blocks.
  void ChooseBlocks() {
    std::mt19937_64 rng(5);
    std::vector<uint32_t> all(kBlocks);
    std::iota(all.begin(), all.end(), 0u);
    std::shuffle(all.begin(), all.end(), rng);
    const uint32_t bs = GetParam().block_size;
    const size_t needed =
        (first_token_ + keys_.size() * model_.layout.tokens_per_chunk + bs - 1) / bs;
    blocks_.assign(all.begin(), all.begin() + needed);
  }

  void TearDown() override {
    for (DevicePtr p : layers_) device_->Free(p);
    client_.reset();
    server_.reset();
    RemoveTree(dir_);
  }

  // A KV cache of every layer on the device, each byte kUntouched.
  void AllocateCache() {
    std::vector<std::byte> fill(paged_.layer_bytes, kUntouched);
    auto stream = *device_->NewStream();
    for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
      layers_.push_back(*device_->Allocate(paged_.layer_bytes));
      ASSERT_TRUE(device_->CopyToDevice(*stream, layers_.back(), fill.data(), fill.size()).ok());
    }
    ASSERT_TRUE(device_->Synchronize(*stream).ok());
  }

  // What layer `layer` of the cache must hold once chunks [0, chunks) of `kv` are in: each
  // vector where the tensor's indexing puts it, every other byte kUntouched.
  std::vector<std::byte> Expected(uint32_t layer, size_t chunks,
                                  const std::vector<std::string>& kv) const {
    const KvLayout& l = model_.layout;
    const uint64_t vec = uint64_t{l.head_dim} * KvDtypeBytes(l.dtype);
    const uint32_t kinds = l.kind == KvKind::kLatent ? 1 : 2, bs = GetParam().block_size;
    std::vector<std::byte> out(paged_.layer_bytes, kUntouched);
    for (size_t j = 0; j < chunks; ++j) {
      const char* slice = kv[j].data() + layer * l.LayerSliceBytes();
      uint64_t src = 0;
      for (uint32_t kind = 0; kind < kinds; ++kind) {
        for (uint32_t t = 0; t < l.tokens_per_chunk; ++t) {
          const uint64_t pos = first_token_ + j * l.tokens_per_chunk + t;
          for (uint32_t h = 0; h < l.num_kv_heads; ++h, src += vec) {
            const uint64_t at = VectorOffset(GetParam().shape, l, kBlocks, bs, kind,
                                             blocks_[pos / bs], pos % bs, h);
            std::memcpy(out.data() + at, slice + src, vec);
          }
        }
      }
    }
    return out;
  }

  // Whether the layer holds `expected` now: the emulated device's memory is host memory, read
  // as it is at this instant; a GPU's is copied back on a stream of its own.
  bool LayerHolds(uint32_t layer, const std::vector<std::byte>& expected) const {
    if (device_->emulated()) {
      return std::memcmp(reinterpret_cast<const void*>(layers_[layer]), expected.data(),
                         expected.size()) == 0;
    }
    std::byte* host = *device_->AllocatePinned(expected.size());
    auto stream = *device_->NewStream();
    const bool same = device_->CopyToHost(*stream, host, layers_[layer], expected.size()).ok() &&
                      device_->Synchronize(*stream).ok() &&
                      std::memcmp(host, expected.data(), expected.size()) == 0;
    device_->FreePinned(host);
    return same;
  }

  DeviceRetrievalRequest Request(uint32_t staging_layers = 2) const {
    DeviceRetrievalRequest req{.model = model_,
                               .keys = keys_,
                               .layers = {0, model_.layout.num_layers},
                               .target = {.device = device_,
                                          .paged = paged_,
                                          .layer_bases = layers_,
                                          .block_ids = blocks_,
                                          .first_token = first_token_}};
    req.staging_layers = staging_layers;
    return req;
  }

  ModelPreset model_;
  PagedKvLayout paged_;
  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<device::Device> device_;
  std::vector<ChunkKey> keys_;
  std::vector<std::string> kv_;
  std::vector<uint32_t> blocks_;
  std::vector<DevicePtr> layers_;
  uint64_t first_token_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Layouts, DeviceKvTest,
                         ::testing::Values(Case{"FlashAttn16", Shape::kFlashAttn, 16},
                                           Case{"FlashAttn8", Shape::kFlashAttn, 8},
                                           Case{"FlashAttn32", Shape::kFlashAttn, 32},
                                           Case{"FlashInfer16", Shape::kFlashInfer, 16},
                                           Case{"Hnd16", Shape::kHnd, 16},
                                           Case{"MlaLatent16", Shape::kLatent, 16},
                                           Case{"MlaLatent64", Shape::kLatent, 64}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST_P(DeviceKvTest, EveryLayerLandsInItsBlocksAndIsReadyOnlyOnceItsCopyCompleted) {
  AllocateCache();
  std::vector<std::vector<std::byte>> expected;
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l)
    expected.push_back(Expected(l, kStored, kv_));
  std::vector<int> ready_and_right(model_.layout.num_layers, -1);
  DeviceRetrievalRequest req = Request();
  req.on_layer = [&](uint32_t layer, const Status& s) {
    ready_and_right[layer] = s.ok() && LayerHolds(layer, expected[layer]);
  };
  auto r = RetrieveToDevice(*client_, std::move(req));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(*(*r)->Hits(), kStored);
  auto engine = *device_->NewStream();
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    if (l % 2 == 0) {
      ASSERT_TRUE((*r)->WaitForLayer(l).ok());
      EXPECT_TRUE(LayerHolds(l, expected[l])) << "layer " << l;
    } else {
      // The engine's stream waits for the copy; the host does not.
      ASSERT_TRUE((*r)->StreamWaitForLayer(l, *engine).ok());
      std::vector<std::byte> seen(paged_.layer_bytes);
      ASSERT_TRUE(device_->CopyToHost(*engine, seen.data(), layers_[l], seen.size()).ok());
      ASSERT_TRUE(device_->Synchronize(*engine).ok());
      EXPECT_TRUE(seen == expected[l]) << "layer " << l;
    }
  }
  ASSERT_TRUE((*r)->Wait().ok());
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    EXPECT_EQ(ready_and_right[l], 1) << "layer " << l << " reported before its bytes were in";
  }
  const DeviceTransferStats stats = (*r)->Stats();
  EXPECT_EQ(stats.staging_bytes, 2 * keys_.size() * model_.layout.LayerSliceBytes());
  EXPECT_EQ(stats.layers, model_.layout.num_layers);
  EXPECT_EQ(stats.bytes,
            uint64_t{model_.layout.num_layers} * kStored * model_.layout.LayerSliceBytes());
  // A scatter (a copy and a kernel launch), an event and a wait for it, a layer.
  EXPECT_EQ(stats.driver_calls, 4u * model_.layout.num_layers);
}

TEST_P(DeviceKvTest, ARangeOfLayersFromATokenInsideABlock) {
  first_token_ = GetParam().block_size > 16 ? 16 : 0;
  ChooseBlocks();
  AllocateCache();
  DeviceRetrievalRequest req = Request(1);
  req.layers = {2, 5};
  req.target.layer_bases = {layers_[2], layers_[3], layers_[4]};
  req.mode = RetrievalMode::kPlainLayerwise;
  auto r = RetrieveToDevice(*client_, std::move(req));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  ASSERT_TRUE((*r)->Wait().ok());
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    EXPECT_TRUE(LayerHolds(l, Expected(l, l >= 2 && l < 5 ? kStored : 0, kv_))) << l;
  }
  EXPECT_EQ((*r)->WaitForLayer(1).code(), StatusCode::kInvalidArgument);
}

TEST_P(DeviceKvTest, ADamagedSliceIsNeverCopiedNorAnyLayerAfterIt) {
  AllocateCache();
  const uint32_t damaged = 3;
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(server_->store_dir() + "/objects")) {
    if (e.path().filename() == "kvc%2F" + keys_[1].ToHex()) file = e.path();
  }
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(ChunkGeometry(model_.layout, keys_[1]).LayerOffset(damaged) + 100);
    f.put('\x5a');
  }
  auto r = RetrieveToDevice(*client_, Request());
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE((*r)->Wait().ok());
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    const Status s = (*r)->WaitForLayer(l);
    EXPECT_EQ(s.ok(), l < damaged) << l << ": " << s.ToString();
    // The layers before it are whole; from it on, not one byte reached the blocks.
    EXPECT_TRUE(LayerHolds(l, Expected(l, l < damaged ? kStored : 0, kv_))) << l;
  }
}

TEST_P(DeviceKvTest, SavedFromDeviceMemoryAndReadBackByteForByte) {
  AllocateCache();
  // New chunks: the engine's stream "computes" each layer (a delayed copy of its bytes into the
  // blocks) and the save is handed the layer at once, before that copy has run.
  std::mt19937_64 rng(99);
  std::vector<ChunkKey> keys =
      KeyNamespace(model_.name, model_.layout)
          .KeysForTokens(RandomTokens(rng, model_.layout.tokens_per_chunk * 4));
  std::vector<std::string> kv;
  for (size_t j = 0; j < keys.size(); ++j)
    kv.push_back(RandomBytes(rng, model_.layout.ChunkKvBytes()));
  auto engine = *device_->NewStream();
  auto save = SaveFromDevice(
      *client_,
      {.model = model_,
       .keys = keys,
       .source = {.device = device_, .paged = paged_, .layer_bases = layers_, .block_ids = blocks_},
       .staging_layers = 2});
  ASSERT_TRUE(save.has_value()) << save.error().ToString();
  ASSERT_FALSE((*save)->dropped());
  std::vector<std::vector<std::byte>> computed;
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    computed.push_back(Expected(l, keys.size(), kv));
    ASSERT_TRUE(
        device_->CopyToDevice(*engine, layers_[l], computed[l].data(), computed[l].size()).ok());
    ASSERT_TRUE((*save)->SaveLayer(l, *engine).ok());
  }
  EXPECT_EQ((*save)->SaveLayer(0, *engine).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*save)->SaveLayer(model_.layout.num_layers, *engine).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*save)->Wait().ok());
  EXPECT_EQ((*save)->Stats().layers, model_.layout.num_layers);
  client_->Flush();
  // Read back through the host path: every slice as the chunk's bytes were.
  const uint64_t slice = model_.layout.LayerSliceBytes();
  std::vector<std::string> regions(model_.layout.num_layers,
                                   std::string(keys.size() * slice, '\0'));
  LayerwiseRequest req{.model = model_, .keys = keys, .layers = {0, model_.layout.num_layers}};
  for (std::string& r : regions) req.regions.push_back(AsWritableBytes(r));
  auto r = client_->RetrieveLayerwise(std::move(req));
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE((*r)->Wait().ok());
  ASSERT_EQ(*(*r)->Hits(), keys.size());
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l) {
    for (size_t j = 0; j < keys.size(); ++j) {
      ASSERT_EQ(regions[l].substr(j * slice, slice), kv[j].substr(l * slice, slice))
          << "layer " << l << " chunk " << j;
    }
  }
}

TEST_P(DeviceKvTest, MalformedRequestsAreRefusedBeforeAnythingMoves) {
  AllocateCache();
  auto refused = [&](DeviceRetrievalRequest req) {
    auto r = RetrieveToDevice(*client_, std::move(req));
    return r.has_value() ? StatusCode::kOk : r.error().code();
  };
  DeviceRetrievalRequest req = Request();
  req.mode = RetrievalMode::kAggregatedChunkwise;
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.block_ids.pop_back();  // too few blocks for the last chunk
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.block_ids[0] = kBlocks;  // outside the cache
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.layer_bases.pop_back();
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.paged.layer_bytes -= 1;  // the last block's last vector would not fit
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.paged.num_blocks = UINT64_MAX;  // every size past 64 bits
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.target.first_token = UINT64_MAX;
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  req = Request();
  req.staging_layers = 0;
  EXPECT_EQ(refused(req), StatusCode::kInvalidArgument);
  for (uint32_t l = 0; l < model_.layout.num_layers; ++l)
    EXPECT_TRUE(LayerHolds(l, Expected(l, 0, kv_)));
}

TEST(PagedKvSegmentsTest, ContiguousVectorsMergeIntoOneRunPerKAndV) {
  const KvLayout kv = FindModelPreset("llama-3.1-8b")->layout;
  const uint64_t vec = 128 * 2, slice = kv.LayerSliceBytes();
  const std::vector<uint32_t> blocks = {7, 3};
  // FLASH_ATTN, a chunk a block: K and V of a chunk are one run each.
  auto fa = PagedKvSegments(kv, PagedKvLayout::FlashAttn(kv, 10, 16), blocks, 0, 2);
  ASSERT_TRUE(fa.has_value());
  ASSERT_EQ(fa->segments.size(), 4u);
  EXPECT_EQ(fa->chunk_ends, (std::vector<size_t>{2, 4}));
  const uint64_t block = 16 * 8 * vec;
  EXPECT_EQ(fa->segments[0], (device::CopySegment{0, 7 * block, slice / 2}));
  EXPECT_EQ(fa->segments[1], (device::CopySegment{slice / 2, 10 * block + 7 * block, slice / 2}));
  EXPECT_EQ(fa->segments[2], (device::CopySegment{slice, 3 * block, slice / 2}));
  // HND: a vector a run (a token's heads are block_size vectors apart), but for the last K
  // vector (head 7, token 15), which V's first (head 0, token 0) follows in both.
  auto hnd = PagedKvSegments(kv, PagedKvLayout::FlashInferHnd(kv, 10, 16), blocks, 0, 1);
  ASSERT_TRUE(hnd.has_value());
  EXPECT_EQ(hnd->segments.size(), 2u * 16 * 8 - 1);
  EXPECT_EQ(hnd->segments[16 * 8 - 1].bytes, 2 * vec);
  EXPECT_EQ(hnd->segments[1], (device::CopySegment{vec, 7 * 2 * block + 16 * vec, vec}));
}

}  // namespace
}  // namespace objectcache
