// The client library against a real `objectcache serve`: lookup, layerwise retrieval with
// per-layer readiness, a chunk damaged on disk, and the server killed mid-stream.
#include "objectcache/client.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "client/s3_connection.h"
#include "objectcache/chunk_object.h"
#include "objectcache/store.h"
#include "store/scratch_dir.h"
#include "test/server_process.h"

namespace objectcache {
namespace {

namespace fs = std::filesystem;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir();
    server_ = std::make_unique<testing::ServerProcess>(dir_);
    port_ = server_->port();
    ASSERT_GT(port_, 0);
    endpoint_ = "http://127.0.0.1:" + std::to_string(port_);
    client::S3Connection conn(*client::S3Endpoint::Parse(endpoint_), client::S3Credentials{});
    auto res = conn.Send("PUT", "/kvc", {}, "", [](auto) { return Status(); },
                         {{"x-objectcache-kv-layout", "llama-3.1-8b"}});
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    ASSERT_EQ(res->status, 200u) << res->error_body;
    std::mt19937_64 rng(11);
    std::vector<uint32_t> tokens(16 * 5);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 128000);
    keys_ = KeyNamespace(model_.name, model_.layout).KeysForTokens(tokens);
    for (size_t i = 0; i < keys_.size(); ++i) {
      std::string kv(model_.layout.ChunkKvBytes(), '\0');
      for (char& c : kv) c = static_cast<char>(rng());
      kv_.push_back(kv);
      if (i == 4) continue;  // the prefix stops at chunk 4
      std::string obj = *EncodeChunkObject(model_.layout, keys_[i], AsBytes(kv));
      auto put =
          conn.Send("PUT", "/kvc/" + keys_[i].ToHex(), {}, obj, [](auto) { return Status(); });
      ASSERT_TRUE(put.has_value() && put->status == 200);
    }
  }

  void TearDown() override {
    server_.reset();
    RemoveTree(dir_);
  }

  std::unique_ptr<Client> MakeClient() {
    auto c = Client::Create({.endpoints = {endpoint_},
                             .bucket = "kvc",
                             .access_key = "",
                             .secret_key = "",
                             .timeout = std::chrono::seconds(10)});
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }

  std::string Slice(size_t chunk, uint32_t layer) const {
    const uint64_t s = model_.layout.LayerSliceBytes();
    return kv_[chunk].substr(layer * s, s);
  }

  ModelPreset model_ = *FindModelPreset("llama-3.1-8b");
  std::string dir_, endpoint_;
  std::unique_ptr<testing::ServerProcess> server_;
  int port_ = 0;
  std::vector<ChunkKey> keys_;
  std::vector<std::string> kv_;
};

TEST_F(ClientTest, LookupFindsTheCachedPrefix) {
  auto c = MakeClient();
  Result<size_t> hits = c->Lookup(keys_);
  ASSERT_TRUE(hits.has_value()) << hits.error().ToString();
  EXPECT_EQ(*hits, 4u);
  EXPECT_EQ(*c->Lookup(std::span(keys_).subspan(4)), 0u);
}

TEST_F(ClientTest, LayersArriveInOrderVerifiedIntoCallerMemory) {
  auto c = MakeClient();
  const uint64_t slice = model_.layout.LayerSliceBytes();
  std::vector<std::string> regions(4, std::string(keys_.size() * slice, '\0'));
  std::vector<uint32_t> order;
  std::mutex mu;
  LayerwiseRequest req{.model = model_,
                       .keys = keys_,
                       .layers = {2, 6},
                       .regions = {},
                       .on_layer = [&](uint32_t layer, const Status& s) {
                         std::lock_guard lock(mu);
                         if (s.ok()) order.push_back(layer);
                       }};
  for (std::string& r : regions) req.regions.push_back(AsWritableBytes(r));
  auto retrieval = c->RetrieveLayerwise(std::move(req));
  ASSERT_TRUE(retrieval.has_value()) << retrieval.error().ToString();
  EXPECT_EQ(*(*retrieval)->Hits(), 4u);
  for (uint32_t layer = 2; layer < 6; ++layer) {
    ASSERT_TRUE((*retrieval)->WaitForLayer(layer).ok()) << layer;
    for (size_t chunk = 0; chunk < 4; ++chunk) {
      ASSERT_EQ(regions[layer - 2].substr(chunk * slice, slice), Slice(chunk, layer))
          << "layer " << layer << " chunk " << chunk;
    }
  }
  EXPECT_TRUE((*retrieval)->Wait().ok());
  EXPECT_EQ(order, (std::vector<uint32_t>{2, 3, 4, 5}));
  EXPECT_EQ((*retrieval)->WaitForLayer(7).code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, PlainPerLayerGetsDeliverTheSameBytes) {
  auto c = MakeClient();
  const uint64_t slice = model_.layout.LayerSliceBytes();
  std::vector<std::string> regions(3, std::string(keys_.size() * slice, '\0'));
  LayerwiseRequest req{.model = model_, .keys = keys_, .layers = {10, 13}};
  req.mode = RetrievalMode::kPlainLayerwise;
  for (std::string& r : regions) req.regions.push_back(AsWritableBytes(r));
  auto retrieval = *c->RetrieveLayerwise(std::move(req));
  EXPECT_EQ(*retrieval->Hits(), 4u);
  ASSERT_TRUE(retrieval->Wait().ok());
  for (uint32_t layer = 10; layer < 13; ++layer) {
    for (size_t chunk = 0; chunk < 4; ++chunk) {
      ASSERT_EQ(regions[layer - 10].substr(chunk * slice, slice), Slice(chunk, layer));
    }
  }
}

TEST_F(ClientTest, ChunkDamagedOnDiskFailsItsLayerAndNothingAfter) {
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(server_->store_dir() + "/objects")) {
    if (e.path().filename() == "kvc%2F" + keys_[1].ToHex()) file = e.path();
  }
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kChunkHeaderRegion + 3 * model_.layout.LayerSliceBytes() + 100);
    f.put('\x5a');
  }
  auto c = MakeClient();
  const uint64_t slice = model_.layout.LayerSliceBytes();
  std::vector<std::string> regions(4, std::string(keys_.size() * slice, '\0'));
  LayerwiseRequest req{.model = model_, .keys = keys_, .layers = {2, 6}};
  for (std::string& r : regions) req.regions.push_back(AsWritableBytes(r));
  auto retrieval = *c->RetrieveLayerwise(std::move(req));
  EXPECT_TRUE(retrieval->WaitForLayer(2).ok());
  EXPECT_EQ(retrieval->WaitForLayer(3).code(), StatusCode::kDataLoss);
  EXPECT_FALSE(retrieval->WaitForLayer(4).ok());
  Status all = retrieval->Wait();
  EXPECT_EQ(all.code(), StatusCode::kDataLoss);
  EXPECT_NE(all.message().find("layer 3"), std::string::npos) << all.ToString();
  // Plain per-layer GETs check each slice too.
  LayerwiseRequest plain{.model = model_, .keys = keys_, .layers = {2, 6}};
  plain.mode = RetrievalMode::kPlainLayerwise;
  for (std::string& r : regions) plain.regions.push_back(AsWritableBytes(r));
  auto p = *c->RetrieveLayerwise(std::move(plain));
  EXPECT_TRUE(p->WaitForLayer(2).ok());
  EXPECT_EQ(p->WaitForLayer(3).code(), StatusCode::kDataLoss);
}

TEST_F(ClientTest, WriteBehindStoresWithoutBlockingAndDropsWhenFull) {
  std::vector<uint32_t> tokens(16 * 6, 99);
  std::vector<ChunkKey> keys = KeyNamespace(model_.name, model_.layout).KeysForTokens(tokens);
  std::vector<std::string> objects;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string kv(model_.layout.ChunkKvBytes(), static_cast<char>('a' + i));
    objects.push_back(*EncodeChunkObject(model_.layout, keys[i], AsBytes(kv)));
  }
  {
    auto c = MakeClient();
    for (size_t i = 0; i < keys.size(); ++i) c->StoreAsync(keys[i], objects[i]);
    c->Flush();
    ClientStats st = c->Stats();
    EXPECT_EQ(st.stored, keys.size());
    EXPECT_EQ(st.dropped + st.failed, 0u);
    EXPECT_EQ(*c->Lookup(keys), keys.size());
    c->StoreAsync(keys[0], "not a chunk object");  // refused by the KV bucket
    c->Flush();
    EXPECT_EQ(c->Stats().failed, 1u);
  }
  // A queue of one chunk's size: queuing many at once drops some instead of blocking.
  auto small = Client::Create({.endpoints = {endpoint_},
                               .bucket = "kvc",
                               .access_key = "",
                               .secret_key = "",
                               .timeout = std::chrono::seconds(10),
                               .write_behind_bytes = objects[0].size()});
  ASSERT_TRUE(small.has_value());
  for (int round = 0; round < 20; ++round)
    (*small)->StoreAsync(keys[round % keys.size()], objects[round % keys.size()]);
  (*small)->Flush();
  ClientStats st = (*small)->Stats();
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.stored + st.dropped + st.failed, 20u);
}

TEST_F(ClientTest, ServerKilledMidStreamFailsCleanlyWithoutHanging) {
  auto c = MakeClient();
  const uint64_t slice = model_.layout.LayerSliceBytes();
  std::vector<std::string> regions(32, std::string(keys_.size() * slice, '\0'));
  LayerwiseRequest req{.model = model_, .keys = keys_, .layers = {0, 32}};
  for (std::string& r : regions) req.regions.push_back(AsWritableBytes(r));
  auto retrieval = *c->RetrieveLayerwise(std::move(req));
  ASSERT_TRUE(retrieval->WaitForLayer(0).ok());
  server_->Stop(SIGKILL);
  // Either everything had already arrived, or the end is a clean error; never a hang.
  Status all = retrieval->Wait();
  for (uint32_t layer = 0; layer < 32; ++layer) {
    Status s = retrieval->WaitForLayer(layer);
    if (!s.ok()) {
      EXPECT_FALSE(all.ok());
      continue;
    }
    for (size_t chunk = 0; chunk < 4; ++chunk) {
      ASSERT_EQ(regions[layer].substr(chunk * slice, slice), Slice(chunk, layer)) << layer;
    }
  }
  EXPECT_EQ(c->Lookup(keys_).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace objectcache
