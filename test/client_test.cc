// The client library against a real `objectcache serve`: lookup, layerwise retrieval with
// per-layer readiness, a chunk damaged on disk, and the server killed mid-stream.
#include "objectcache/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <climits>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "core/seeded_data.h"
#include "objectcache/chunk_object.h"
#include "objectcache/kv_pool.h"
#include "objectcache/store.h"
#include "s3/s3_connection.h"
#include "store/scratch_dir.h"
#include "test/server_process.h"

namespace objectcache {
namespace {

namespace fs = std::filesystem;

// Every test runs on both layerwise wire formats (docs/wire-format.md): version 1, checked by
// the server, and version 2, the writers' checksums checked by the client.
class ClientTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir();
    server_ = std::make_unique<testing::ServerProcess>(dir_);
    port_ = server_->port();
    ASSERT_GT(port_, 0);
    endpoint_ = "http://127.0.0.1:" + std::to_string(port_);
    s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint_), s3::S3Credentials{});
    Result<s3::S3Response> res = testing::PutBucket(conn, "kvc", "llama-3.1-8b");
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    ASSERT_EQ(res->status, 200u) << res->error_body;
    std::mt19937_64 rng(11);
    keys_ = KeyNamespace(model_.name, model_.layout).KeysForTokens(RandomTokens(rng, 16 * 5));
    for (size_t i = 0; i < keys_.size(); ++i) {
      std::string kv = RandomBytes(rng, model_.layout.ChunkKvBytes());
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

  std::unique_ptr<Client> MakeClient(ClientOptions o = {}) {
    if (o.endpoints == ClientOptions().endpoints) o.endpoints = {endpoint_};
    o.bucket = "kvc";
    o.timeout = std::chrono::seconds(10);
    o.wire_version = GetParam();
    auto c = Client::Create(o);
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }

  void ExpectDamagedLayerFails(uint32_t damaged);

  std::string Slice(size_t chunk, uint32_t layer) const {
    const uint64_t s = model_.layout.LayerSliceBytes();
    return kv_[chunk].substr(layer * s, s);
  }

  // One region per layer of a range, each room for every key's slice.
  struct Regions {
    Regions(const ClientTest& t, size_t layers)
        : bytes(layers, std::string(t.keys_.size() * t.model_.layout.LayerSliceBytes(), '\0')) {}
    std::vector<std::string> bytes;
  };

  LayerwiseRequest Request(Regions* regions, uint32_t first, uint32_t last, RetrievalMode mode,
                           std::vector<ChunkKey> keys = {}) const {
    LayerwiseRequest req{
        .model = model_, .keys = keys.empty() ? keys_ : std::move(keys), .layers = {first, last}};
    req.mode = mode;
    for (std::string& r : regions->bytes) req.regions.push_back(AsWritableBytes(r));
    return req;
  }

  // Layers [first, last) of chunks [0, chunks) are in `regions` as stored.
  void ExpectPrefix(const Regions& regions, uint32_t first, uint32_t last, size_t chunks) const {
    const uint64_t slice = model_.layout.LayerSliceBytes();
    for (uint32_t layer = first; layer < last; ++layer) {
      for (size_t chunk = 0; chunk < chunks; ++chunk) {
        ASSERT_EQ(regions.bytes[layer - first].substr(chunk * slice, slice), Slice(chunk, layer))
            << "layer " << layer << " chunk " << chunk;
      }
    }
  }

  // `n` aggregated retrievals of layers [0, 2) in flight together, each holding its layer-0
  // report, and so its connection, until all have one; then every byte checked.
  void RetrieveAllAtOnce(Client* c, size_t n) {
    std::mutex mu;
    std::condition_variable cv;
    size_t at_layer0 = 0;
    std::vector<Regions> regions(n, Regions(*this, 2));
    std::vector<std::unique_ptr<LayerwiseRetrieval>> running;
    for (Regions& r : regions) {
      LayerwiseRequest req = Request(&r, 0, 2, RetrievalMode::kAggregatedLayerwise);
      req.on_layer = [&](uint32_t layer, const Status&) {
        if (layer != 0) return;
        std::unique_lock lock(mu);
        if (++at_layer0 == n) cv.notify_all();
        cv.wait(lock, [&] { return at_layer0 == n; });
      };
      running.push_back(*c->RetrieveLayerwise(std::move(req)));
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(running[i]->Wait().ok()) << running[i]->Wait().ToString();
      ExpectPrefix(regions[i], 0, 2, 4);
    }
  }

  std::string Object(size_t chunk) const {
    return *EncodeChunkObject(model_.layout, keys_[chunk], AsBytes(kv_[chunk]));
  }

  ModelPreset model_ = *FindModelPreset("llama-3.1-8b");
  std::string dir_, endpoint_;
  std::unique_ptr<testing::ServerProcess> server_;
  int port_ = 0;
  std::vector<ChunkKey> keys_;
  std::vector<std::string> kv_;
};

// Options that are fine but for the one a case changes (Create connects to nothing).
ClientOptions GoodOptions() { return {.endpoints = {"http://127.0.0.1:1"}, .bucket = "kvc"}; }

void ExpectRefused(const ClientOptions& o, std::string_view why) {
  Result<std::unique_ptr<Client>> c = Client::Create(o);
  ASSERT_FALSE(c.has_value()) << why;
  EXPECT_EQ(c.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.error().message().find(why), std::string::npos) << c.error().message();
}

TEST(ClientOptionsTest, AnUnknownWireVersionIsRefused) {
  ASSERT_TRUE(Client::Create(GoodOptions()).has_value());
  for (int v : {0, 3, -1}) {
    ClientOptions o = GoodOptions();
    o.wire_version = v;
    ExpectRefused(o, "wire_version");
  }
}

TEST(ClientOptionsTest, NumbersOutsideTheirRangeAreRefused) {
  using std::chrono::seconds;
  for (seconds t : {seconds(0), seconds(-1), seconds(86401), seconds::max()}) {
    ClientOptions o = GoodOptions();
    o.timeout = t;
    ExpectRefused(o, "timeout");
  }
  const std::pair<int ClientOptions::*, int> bad[] = {
      {&ClientOptions::retries, -1},
      {&ClientOptions::retries, 101},
      {&ClientOptions::parallel_requests, 0},
      {&ClientOptions::parallel_requests, INT_MAX},
      {&ClientOptions::aggregated_streams, -1},
      {&ClientOptions::aggregated_streams, 9},
  };
  for (const auto& [field, value] : bad) {
    ClientOptions o = GoodOptions();
    o.*field = value;
    ExpectRefused(o, "retries must be 0 to 100");
  }
  ClientOptions edges = GoodOptions();
  edges.timeout = seconds(86400);
  edges.retries = 0;
  edges.parallel_requests = 1024;
  edges.aggregated_streams = 8;
  EXPECT_TRUE(Client::Create(edges).has_value());
}

TEST(RetrievalModeTest, EachNameParsesBackToItsModeAndNoOtherNameParses) {
  for (RetrievalMode m : {RetrievalMode::kAggregatedLayerwise, RetrievalMode::kAggregatedChunkwise,
                          RetrievalMode::kPlainLayerwise, RetrievalMode::kPlainChunkwise}) {
    Result<RetrievalMode> parsed = ParseRetrievalMode(RetrievalModeName(m));
    ASSERT_TRUE(parsed.has_value()) << RetrievalModeName(m);
    EXPECT_EQ(*parsed, m);
  }
  for (std::string_view bad : {"", "s3agg-lw", "Local-DRAM-LW", "S3Agg-LW ", "?"}) {
    EXPECT_EQ(ParseRetrievalMode(bad).error().code(), StatusCode::kInvalidArgument) << bad;
  }
}

INSTANTIATE_TEST_SUITE_P(Wire, ClientTest, ::testing::Values(1, 2),
                         [](const auto& p) { return "v" + std::to_string(p.param); });

TEST_P(ClientTest, LookupFindsTheCachedPrefix) {
  auto c = MakeClient();
  Result<size_t> hits = c->Lookup(keys_);
  ASSERT_TRUE(hits.has_value()) << hits.error().ToString();
  EXPECT_EQ(*hits, 4u);
  EXPECT_EQ(*c->Lookup(std::span(keys_).subspan(4)), 0u);
}

TEST_P(ClientTest, LayersArriveInOrderVerifiedIntoCallerMemory) {
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

constexpr RetrievalMode kAllModes[] = {
    RetrievalMode::kAggregatedLayerwise, RetrievalMode::kAggregatedChunkwise,
    RetrievalMode::kPlainLayerwise, RetrievalMode::kPlainChunkwise};

TEST_P(ClientTest, EveryModeDeliversTheSameVerifiedBytesInLayerOrder) {
  auto c = MakeClient();
  for (RetrievalMode mode : kAllModes) {
    SCOPED_TRACE(RetrievalModeName(mode));
    Regions regions(*this, 3);
    std::vector<uint32_t> order;
    LayerwiseRequest req = Request(&regions, 10, 13, mode);
    req.on_layer = [&](uint32_t layer, const Status& s) {
      if (s.ok()) order.push_back(layer);  // one caller at a time: layers come in order
    };
    auto retrieval = *c->RetrieveLayerwise(std::move(req));
    EXPECT_EQ(*retrieval->Hits(), 4u);
    ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
    EXPECT_EQ(order, (std::vector<uint32_t>{10, 11, 12}));
    ExpectPrefix(regions, 10, 13, 4);
  }
}

// Damages one byte of layer `damaged` of chunk 1 on disk, then retrieves layers [2, 6) in every
// mode: the layers before it are handed over whole, it and every later one fail with DataLoss.
void ClientTest::ExpectDamagedLayerFails(uint32_t damaged) {
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(server_->store_dir() + "/objects")) {
    if (e.path().filename() == "kvc%2F" + keys_[1].ToHex()) file = e.path();
  }
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kChunkHeaderRegion + damaged * model_.layout.LayerSliceBytes() + 100);
    f.put('\x5a');
  }
  auto c = MakeClient();
  for (RetrievalMode mode : kAllModes) {
    SCOPED_TRACE(RetrievalModeName(mode));
    const bool chunkwise =
        mode == RetrievalMode::kAggregatedChunkwise || mode == RetrievalMode::kPlainChunkwise;
    Regions regions(*this, 4);
    auto retrieval = *c->RetrieveLayerwise(Request(&regions, 2, 6, mode));
    // Layerwise: the layers before the damaged one are whole and handed over. Chunkwise: none.
    for (uint32_t layer = 2; layer < damaged; ++layer) {
      EXPECT_EQ(retrieval->WaitForLayer(layer).ok(), !chunkwise) << layer;
    }
    EXPECT_EQ(retrieval->WaitForLayer(chunkwise ? 2 : damaged).code(), StatusCode::kDataLoss);
    for (uint32_t layer = damaged; layer < 6; ++layer) {
      EXPECT_FALSE(retrieval->WaitForLayer(layer).ok());
    }
    Status all = retrieval->Wait();
    EXPECT_EQ(all.code(), StatusCode::kDataLoss) << all.ToString();
    EXPECT_NE(all.message().find("layer " + std::to_string(damaged)), std::string::npos)
        << all.ToString();
    if (mode == RetrievalMode::kAggregatedLayerwise ||
        mode == RetrievalMode::kAggregatedChunkwise) {  // the frame's error names the chunk
      EXPECT_NE(all.message().find(keys_[1].ToHex()), std::string::npos) << all.ToString();
    }
  }
}

TEST_P(ClientTest, ChunkDamagedOnDiskFailsItsLayerAndNothingAfter) {
  // Layer 4: of the layers [2, 6) asked for, the server (v1) reads layer 2 alone and then
  // layers 3 to 5 in one window (layerwise.cc, WindowPlan), whose layer 3 is still whole.
  ExpectDamagedLayerFails(4);
}

TEST_P(ClientTest, FirstLayerDamagedOnDiskFailsFromTheStart) {
  // Layer 2, the first asked for: no layer is handed over.
  ExpectDamagedLayerFails(2);
}

TEST_P(ClientTest, WriteBehindStoresWithoutBlockingAndDropsWhenFull) {
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

TEST_P(ClientTest, LayerwiseSaveStoresOnceTheLastLayerIsIn) {
  std::vector<uint32_t> tokens(16 * 3, 7);
  std::vector<ChunkKey> keys = KeyNamespace(model_.name, model_.layout).KeysForTokens(tokens);
  const uint64_t slice = model_.layout.LayerSliceBytes();
  // The engine's layers: chunk j's slice of layer l is kv_[j]'s, in one buffer per layer.
  std::vector<std::string> layers(model_.layout.num_layers);
  for (uint32_t l = 0; l < layers.size(); ++l) {
    for (size_t j = 0; j < keys.size(); ++j) layers[l] += Slice(j, l);
  }
  auto c = MakeClient({.dram_tier_bytes = 64 << 20});
  auto save = c->StartSave(model_, keys);
  ASSERT_TRUE(save.has_value());
  EXPECT_FALSE((*save)->dropped());
  for (uint32_t l = model_.layout.num_layers; l-- > 0;) {  // any order
    const std::string& layer = layers[l];
    ASSERT_TRUE((*save)
                    ->SaveLayer(l,
                                [&](size_t j) {
                                  return reinterpret_cast<const std::byte*>(layer.data() +
                                                                            j * slice);
                                })
                    .ok());
    if (l > 0) {
      c->Flush();  // nothing is queued before the last layer
      EXPECT_EQ(c->Stats().stored, 0u);
    }
  }
  EXPECT_EQ((*save)->SaveLayer(0, [&](size_t) { return nullptr; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*save)->SaveLayer(32, [&](size_t) { return nullptr; }).code(),
            StatusCode::kInvalidArgument);
  c->Flush();
  EXPECT_EQ(c->Stats().stored, keys.size());
  EXPECT_GT(c->Stats().dram_bytes, 0u);  // sealed objects join the DRAM tier too
  save->reset();
  auto fresh = MakeClient();
  Regions regions(*this, model_.layout.num_layers);
  auto req =
      Request(&regions, 0, model_.layout.num_layers, RetrievalMode::kAggregatedLayerwise, keys);
  auto r = fresh->RetrieveLayerwise(std::move(req));
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE((*r)->Wait().ok());
  ExpectPrefix(regions, 0, model_.layout.num_layers, keys.size());
  // Saves that do not fit the queue are dropped without blocking; an abandoned save gives its
  // room back.
  auto small = MakeClient({.write_behind_bytes = 2 * ((2u << 20) + 4096)});
  auto too_big = small->StartSave(model_, keys);
  EXPECT_TRUE((*too_big)->dropped());
  EXPECT_TRUE((*too_big)->SaveLayer(0, [&](size_t) { return nullptr; }).ok());  // copies nothing
  EXPECT_EQ(small->Stats().dropped, keys.size());
  std::vector<ChunkKey> two(keys.begin(), keys.begin() + 2);
  EXPECT_FALSE((*small->StartSave(model_, two))->dropped());  // destroyed at once
  EXPECT_FALSE((*small->StartSave(model_, two))->dropped());
  EXPECT_EQ(small->Stats().dropped, keys.size() + 4);
}

TEST_P(ClientTest, ServerKilledMidStreamFailsCleanlyWithoutHanging) {
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

// Kept-alive connections the server closed while they sat idle in the client's pool (its idle
// timeout) are not used for a request. With no retries, one handed out would fail the request
// it carries; after eight of them, every mode and a lookup still succeed.
TEST_P(ClientTest, ConnectionsTheServerClosedWhileIdleAreNotUsed) {
  server_->Stop(SIGTERM);
  server_ = std::make_unique<testing::ServerProcess>(
      dir_, port_, std::vector<std::string>{"--idle-timeout", "1"});
  ASSERT_EQ(server_->port(), port_);
  auto c = MakeClient({.retries = 0});
  RetrieveAllAtOnce(c.get(), 8);  // eight connections, idle in the pool afterwards
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // the server closes them all
  for (RetrievalMode mode :
       {RetrievalMode::kAggregatedLayerwise, RetrievalMode::kAggregatedChunkwise,
        RetrievalMode::kPlainLayerwise, RetrievalMode::kPlainChunkwise}) {
    Regions regions(*this, 2);
    auto r = *c->RetrieveLayerwise(Request(&regions, 0, 2, mode));
    ASSERT_TRUE(r->Wait().ok()) << static_cast<int>(mode) << ": " << r->Wait().ToString();
    ExpectPrefix(regions, 0, 2, 4);
  }
  Result<size_t> hits = c->Lookup(keys_);
  ASSERT_TRUE(hits.has_value()) << hits.error().ToString();
  EXPECT_EQ(*hits, 4u);
}

// The server's count of connections it accepted, read through `conn`.
uint64_t ConnectionsAccepted(s3::S3Connection& conn) {
  const std::optional<uint64_t> n = testing::MetricValue(conn, "objectcache_connections_total");
  EXPECT_TRUE(n.has_value());
  return n.value_or(0);
}

// 32 retrievals in flight at once, twice: the second round finds the first round's 32
// connections idle in the pool and opens none (the pool kept at most 16 before it was
// ClientOptions::max_idle_connections, and every round past 16 opened, and closed, the rest).
TEST_P(ClientTest, ConcurrentRetrievalsReuseTheConnectionsOfTheLastRound) {
  constexpr size_t kInFlight = 32;
  auto c = MakeClient();
  s3::S3Connection metrics(*s3::S3Endpoint::Parse(endpoint_), s3::S3Credentials{});
  RetrieveAllAtOnce(c.get(), kInFlight);
  const uint64_t after_first = ConnectionsAccepted(metrics);
  RetrieveAllAtOnce(c.get(), kInFlight);
  EXPECT_EQ(ConnectionsAccepted(metrics), after_first);
}

TEST_P(ClientTest, DramTierHitsAreCopiedWithoutTheNetwork) {
  // Chunks 0 and 1 pass through this client's DRAM tier; 2 and 3 only through the server.
  auto c = MakeClient({.dram_tier_bytes = 64 << 20});
  for (size_t i = 0; i < 2; ++i) c->StoreAsync(keys_[i], Object(i));
  c->Flush();
  EXPECT_GT(c->Stats().dram_bytes, 0u);
  for (RetrievalMode mode : kAllModes) {
    SCOPED_TRACE(RetrievalModeName(mode));
    Regions regions(*this, 32);
    auto retrieval = *c->RetrieveLayerwise(Request(&regions, 0, 32, mode));
    EXPECT_EQ(*retrieval->Hits(), 4u);  // 2 from DRAM, 2 from the server
    ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
    ExpectPrefix(regions, 0, 32, 4);
  }
  // Full-range retrievals filled the tier: with the server gone, the 4 chunks still come.
  server_->Stop(SIGKILL);
  Regions regions(*this, 32);
  auto retrieval = *c->RetrieveLayerwise(
      Request(&regions, 0, 32, RetrievalMode::kPlainLayerwise, {keys_.begin(), keys_.begin() + 4}));
  ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
  ExpectPrefix(regions, 0, 32, 4);
  // Asking past the DRAM prefix: the unreachable server is a miss, not an error.
  auto past = *c->RetrieveLayerwise(Request(&regions, 0, 32, RetrievalMode::kAggregatedLayerwise));
  EXPECT_EQ(*past->Hits(), 4u);
  ASSERT_TRUE(past->Wait().ok());
  ExpectPrefix(regions, 0, 32, 4);
  EXPECT_EQ(*c->Lookup(std::span(keys_).first(4)), 4u);
}

TEST_P(ClientTest, KeysSpreadOverTwoEndpointsAndComeBackWhole) {
  const std::string dir2 = MakeScratchDir();
  {
    testing::ServerProcess second(dir2);
    ASSERT_GT(second.port(), 0);
    const std::string endpoint2 = "http://127.0.0.1:" + std::to_string(second.port());
    s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint2), s3::S3Credentials{});
    Result<s3::S3Response> res = testing::PutBucket(conn, "kvc", "llama-3.1-8b");
    ASSERT_TRUE(res.has_value() && res->status == 200u);
    // A fresh prefix of 16 chunks, stored through a client of both servers.
    std::vector<uint32_t> tokens(16 * 16);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7919 % 1000);
    keys_ = KeyNamespace(model_.name, model_.layout).KeysForTokens(tokens);
    kv_.clear();
    for (size_t i = 0; i < keys_.size(); ++i) {
      kv_.push_back(std::string(model_.layout.ChunkKvBytes(), static_cast<char>('A' + i)));
    }
    // Three aggregated streams per endpoint: each request carries a stripe of its keys.
    auto both = MakeClient({.endpoints = {endpoint_, endpoint2}, .aggregated_streams = 3});
    for (size_t i = 0; i < keys_.size(); ++i) both->StoreAsync(keys_[i], Object(i));
    both->Flush();
    ASSERT_EQ(both->Stats().stored, keys_.size());
    EXPECT_EQ(*both->Lookup(keys_), keys_.size());
    // Each server holds only its share, and both hold some.
    size_t on_first = 0;
    auto one = MakeClient();
    for (const ChunkKey& k : keys_) on_first += *one->Lookup(std::span(&k, 1));
    EXPECT_GT(on_first, 0u);
    EXPECT_LT(on_first, keys_.size());
    for (RetrievalMode mode : kAllModes) {
      SCOPED_TRACE(RetrievalModeName(mode));
      Regions regions(*this, 4);
      auto retrieval = *both->RetrieveLayerwise(Request(&regions, 0, 4, mode));
      EXPECT_EQ(*retrieval->Hits(), keys_.size());
      ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
      ExpectPrefix(regions, 0, 4, keys_.size());
    }
    // A prefix ends at its first miss whichever server misses it.
    std::vector<ChunkKey> gap = keys_;
    ChunkKey::Bytes stranger = keys_[5].bytes();
    stranger[0] ^= 1;  // a key nobody stored
    gap[5] = ChunkKey(stranger);
    EXPECT_EQ(*both->Lookup(gap), 5u);
  }
  RemoveTree(dir2);
}

// A port on 127.0.0.1 that nothing listens on: connections to it are refused.
std::string DeadEndpoint() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);  // bound, never listened on, now closed
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

TEST_P(ClientTest, WithFailoverADeadEndpointCostsARetryNotTheRequest) {
  // Endpoint 0 is dead and holds the keys whose bytes 8..15 are even (docs/wire-format.md,
  // "Several endpoints"); some of the cached prefix is among them.
  bool some_on_dead = false;
  for (size_t i = 0; i < 4; ++i) some_on_dead |= (keys_[i].bytes()[15] & 1) == 0;
  ASSERT_TRUE(some_on_dead);
  const std::vector<std::string> endpoints = {DeadEndpoint(), endpoint_};
  // Without failover the dead endpoint's share of the request fails.
  auto plain = MakeClient({.endpoints = endpoints, .retries = 1});
  EXPECT_EQ(plain->Lookup(keys_).error().code(), StatusCode::kUnavailable);
  // With it, every request goes on at the live endpoint, in every mode.
  auto c = MakeClient({.endpoints = endpoints, .retries = 1, .failover = true});
  EXPECT_EQ(*c->Lookup(keys_), 4u);
  for (RetrievalMode mode : kAllModes) {
    SCOPED_TRACE(RetrievalModeName(mode));
    Regions regions(*this, 3);
    auto retrieval = *c->RetrieveLayerwise(Request(&regions, 0, 3, mode));
    ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
    EXPECT_EQ(*retrieval->Hits(), 4u);
    ExpectPrefix(regions, 0, 3, 4);
  }
  // Stores too: a chunk whose endpoint is dead lands at the next one.
  c->StoreAsync(keys_[4], Object(4));
  c->Flush();
  EXPECT_EQ(c->Stats().stored, 1u);
  EXPECT_EQ(*c->Lookup(keys_), 5u);
  EXPECT_GT(c->Stats().retries, 0u);
}

TEST_P(ClientTest, AggregatedRetrievalResumesAfterTheServerRestarts) {
  // 64 chunks (128 MiB): far more than the socket buffers hold, so holding the receiver at
  // layer 0 while the server dies cuts the stream mid-way for certain.
  std::vector<uint32_t> tokens(16 * 64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 31 % 5000);
  keys_ = KeyNamespace(model_.name, model_.layout).KeysForTokens(tokens);
  kv_.clear();
  auto c = MakeClient({.retries = 8});
  for (size_t i = 0; i < keys_.size(); ++i) {
    kv_.push_back(std::string(model_.layout.ChunkKvBytes(), static_cast<char>(i * 3)));
    c->StoreAsync(keys_[i], Object(i));
  }
  c->Flush();
  ASSERT_EQ(c->Stats().stored, keys_.size());
  std::mutex mu;
  std::condition_variable cv;
  bool restarted = false;
  Regions regions(*this, 32);
  LayerwiseRequest req = Request(&regions, 0, 32, RetrievalMode::kAggregatedLayerwise);
  req.on_layer = [&](uint32_t layer, const Status&) {
    if (layer != 0) return;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return restarted; });
  };
  auto retrieval = *c->RetrieveLayerwise(std::move(req));
  ASSERT_TRUE(retrieval->WaitForLayer(0).ok());
  server_->Stop(SIGKILL);
  server_ = std::make_unique<testing::ServerProcess>(dir_, port_);
  ASSERT_EQ(server_->port(), port_);
  {
    std::lock_guard lock(mu);
    restarted = true;
  }
  cv.notify_all();
  ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
  EXPECT_EQ(*retrieval->Hits(), keys_.size());
  ExpectPrefix(regions, 0, 32, keys_.size());
}

TEST_P(ClientTest, EveryModeDeliversIntoBlocksNamedByABlockTable) {
  // An engine's paged KV: one 64 KiB block per chunk per layer, from an elastic host pool
  // whose pages would be registered for DMA where a GPU is present.
  const uint64_t slice = model_.layout.LayerSliceBytes();
  auto pool = ElasticPool::Create(*NewHostPageBackend({.register_for_device = true}),
                                  {.reserve_bytes = 1 << 30, .block_bytes = slice});
  ASSERT_TRUE(pool.has_value()) << pool.error().ToString();
  BlockTable table(pool->get());
  auto c = MakeClient();
  for (RetrievalMode mode : kAllModes) {
    SCOPED_TRACE(RetrievalModeName(mode));
    auto ids = table.Allocate(32 * keys_.size());
    ASSERT_TRUE(ids.has_value()) << ids.error().ToString();
    LayerwiseRequest req{.model = model_, .keys = keys_, .layers = {0, 32}};
    req.mode = mode;
    req.destination = [&](uint32_t layer, size_t chunk) {
      return table.Address((*ids)[layer * keys_.size() + chunk]);
    };
    auto retrieval = *c->RetrieveLayerwise(std::move(req));
    ASSERT_TRUE(retrieval->Wait().ok()) << retrieval->Wait().ToString();
    EXPECT_EQ(*retrieval->Hits(), 4u);
    for (uint32_t layer = 0; layer < 32; ++layer) {
      for (size_t chunk = 0; chunk < 4; ++chunk) {
        const std::byte* block = table.Address((*ids)[layer * keys_.size() + chunk]);
        ASSERT_EQ(std::string(reinterpret_cast<const char*>(block), slice), Slice(chunk, layer))
            << layer << " " << chunk;
      }
    }
    table.Free(*ids);
  }
}

TEST_P(ClientTest, AServerUnderABandwidthCapDeliversEveryByteToConcurrentRetrievals) {
  // The same store behind a server that paces layerwise responses under one cap.
  server_.reset();
  for (const char* policy : {"equal", "bytes", "compute-aware"}) {
    SCOPED_TRACE(policy);
    server_ = std::make_unique<testing::ServerProcess>(
        dir_, port_,
        std::vector<std::string>{"--bandwidth-cap", "400MB", "--sched-policy", policy});
    ASSERT_EQ(server_->port(), port_);
    auto c = MakeClient();
    std::vector<Regions> regions(3, Regions(*this, 32));
    std::vector<std::unique_ptr<LayerwiseRetrieval>> running;
    for (size_t i = 0; i < regions.size(); ++i) {
      LayerwiseRequest req = Request(&regions[i], 0, 32, RetrievalMode::kAggregatedLayerwise);
      req.compute_seconds_per_layer = i == 2 ? 0 : 0.001 * (i + 1);  // the last one says nothing
      running.push_back(*c->RetrieveLayerwise(std::move(req)));
    }
    for (size_t i = 0; i < running.size(); ++i) {
      ASSERT_TRUE(running[i]->Wait().ok()) << running[i]->Wait().ToString();
      ExpectPrefix(regions[i], 0, 32, 4);
    }
    // A descriptor with a nonsensical compute time is refused.
    s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint_), s3::S3Credentials{});
    auto bad = conn.Send("POST", "/kvc", {{"layerwise", ""}},
                         R"({"version": 1, "keys": [")" + keys_[0].ToHex() +
                             R"("], "layers": [0, 1], "compute_seconds_per_layer": -1})",
                         [](auto) { return Status(); });
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->status, 400u);
    server_.reset();
  }
}

}  // namespace
}  // namespace objectcache
