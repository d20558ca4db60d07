// `objectcache serve --store rados://...` as a stateless gateway over a real single-node Ceph:
// two gateways over one pool, the client spreading keys over both, and an OSD stopped in the
// middle of a layerwise read. The shared cluster comes from the ctest fixture "ceph"
// ($OBJECTCACHE_TEST_CEPH); the OSD test starts a cluster of its own (scripts/ceph-dev), so that
// stopping its OSD disturbs no other test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "objectcache/client.h"
#include "s3/s3_connection.h"
#include "test/server_process.h"
#include "test/support/ceph_gateways.h"

namespace objectcache {
namespace {

// Counts from the server's /metrics: requests of one operation.
uint64_t RequestsServed(const std::string& endpoint, const std::string& op) {
  s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint), s3::S3Credentials{});
  return testing::MetricValue(conn, "objectcache_requests_total{op=\"" + op + "\"}").value_or(0);
}

class CephGatewayTest : public test_support::CephGatewayFixture {
 protected:
  CephGatewayTest()
      : CephGatewayFixture("OBJECTCACHE_TEST_CEPH", "gateway-test",
                           *FindModelPreset("llama-3.1-8b")) {}

  // Starts a gateway over the pool of the cluster in `cluster`; returns its endpoint.
  std::string StartGateway(const std::string& cluster, int timeout_s = 30) {
    return CephGatewayFixture::StartGateway(RadosUri(cluster, "objectcache", timeout_s));
  }

  void CreateBucket(const std::string& endpoint) {
    CephGatewayFixture::CreateBucket(endpoint, "kvc", "llama-3.1-8b", /*exists_ok=*/true);
  }

  std::unique_ptr<Client> MakeClient(std::vector<std::string> endpoints, int retries = 3) {
    auto c = Client::Create({.endpoints = std::move(endpoints),
                             .bucket = "kvc",
                             .timeout = std::chrono::seconds(20),
                             .retries = retries});
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }

  // `chunks` chunks of a seeded prompt, stored through `writer`.
  void StoreChunks(Client* writer, size_t chunks, uint64_t seed) {
    StorePrefix(writer, chunks, seed, 32);
  }

  // Retrieves every layer of every key in `mode`; OK only if every byte is what was stored.
  Status RetrieveAndCheck(Client* reader, RetrievalMode mode, LayerReadyFn on_layer = {}) {
    std::vector<std::string> regions;
    LayerwiseRequest req = RequestInto(&regions);
    req.mode = mode;
    req.on_layer = std::move(on_layer);
    OC_ASSIGN_OR_RETURN(auto retrieval, reader->RetrieveLayerwise(std::move(req)));
    OC_RETURN_IF_ERROR(retrieval->Wait());
    return CheckRetrieved(*retrieval, regions);
  }
};

TEST_F(CephGatewayTest, ChunksStoredThroughOneGatewayComeBackThroughTheOther) {
  const std::string a = StartGateway(cluster_), b = StartGateway(cluster_);
  CreateBucket(a);
  StoreChunks(MakeClient({a}).get(), 24, 1);
  auto via_b = MakeClient({b});
  EXPECT_EQ(*via_b->Lookup(keys_), keys_.size());
  for (RetrievalMode mode : {RetrievalMode::kAggregatedLayerwise, RetrievalMode::kPlainLayerwise,
                             RetrievalMode::kPlainChunkwise}) {
    Status s = RetrieveAndCheck(via_b.get(), mode);
    EXPECT_TRUE(s.ok()) << RetrievalModeName(mode) << ": " << s.ToString();
  }
  EXPECT_EQ(RequestsServed(a, "LayerwiseRetrieve"), 0u);
  EXPECT_GE(RequestsServed(b, "LayerwiseRetrieve"), 1u);
}

TEST_F(CephGatewayTest, AClientSpreadsKeysOverBothGatewaysAndGetsEveryByte) {
  const std::string a = StartGateway(cluster_), b = StartGateway(cluster_);
  CreateBucket(a);
  auto both = MakeClient({a, b});
  StoreChunks(both.get(), 40, 2);
  // Each gateway took part of the batch stores and serves part of the retrieval.
  EXPECT_GE(RequestsServed(a, "BatchStore"), 1u);
  EXPECT_GE(RequestsServed(b, "BatchStore"), 1u);
  Status s = RetrieveAndCheck(both.get(), RetrievalMode::kAggregatedLayerwise);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(RequestsServed(a, "LayerwiseRetrieve"), 1u);
  EXPECT_GE(RequestsServed(b, "LayerwiseRetrieve"), 1u);
  // And either gateway alone sees all of it: the state is in the cluster, not in a gateway.
  Status alone = RetrieveAndCheck(MakeClient({b}).get(), RetrievalMode::kAggregatedLayerwise);
  EXPECT_TRUE(alone.ok()) << alone.ToString();
}

TEST_F(CephGatewayTest, OsdStoppedMidReadGivesAnErrorOrARetryNeverWrongBytes) {
  // A cluster of this test's own: its OSD is stopped and started.
  const std::string own = dir_ + "/ceph";
  ASSERT_EQ(std::system((std::string(CEPH_DEV_PATH) + " start " + own + " --size 2GiB").c_str()),
            0);
  struct StopCluster {
    std::string dir;
    ~StopCluster() { (void)std::system((std::string(CEPH_DEV_PATH) + " stop " + dir).c_str()); }
  } stop{own};
  // Gateway reads give up after 3 s when the OSD does not answer.
  const std::string gw = StartGateway(own, /*timeout_s=*/3);
  CreateBucket(gw);
  StoreChunks(MakeClient({gw}).get(), 64, 3);  // 128 MiB: more than socket buffers hold

  // Hold the receiver at layer 0 while the OSD goes down, then let the stream go on.
  auto reader = MakeClient({gw}, /*retries=*/2);
  std::mutex mu;
  std::condition_variable cv;
  bool at_layer0 = false, osd_down = false;
  std::thread read([&] {
    Status s = RetrieveAndCheck(reader.get(), RetrievalMode::kAggregatedLayerwise,
                                [&](uint32_t layer, const Status&) {
                                  if (layer != 0) return;
                                  std::unique_lock lock(mu);
                                  at_layer0 = true;
                                  cv.notify_all();
                                  cv.wait(lock, [&] { return osd_down; });
                                });
    // Never wrong bytes: either every byte checked, or an error that is not DataLoss.
    EXPECT_NE(s.code(), StatusCode::kDataLoss) << s.ToString();
    if (!s.ok()) {
      EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInternal ||
                  s.code() == StatusCode::kAborted)
          << s.ToString();
    }
    std::printf("retrieval with the OSD stopped mid-stream: %s\n", s.ToString().c_str());
  });
  // Mid-stream for certain: the response is under way (its first layer in) before the OSD
  // stops. (A fixed pause here let a slow machine stop it before the request was read.)
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return at_layer0; });
  }
  ASSERT_EQ(std::system((std::string(CEPH_DEV_PATH) + " osd-stop " + own).c_str()), 0);
  {
    std::lock_guard lock(mu);
    osd_down = true;
  }
  cv.notify_all();
  read.join();

  // The OSD back: the same gateway, never restarted, serves every byte again.
  ASSERT_EQ(std::system((std::string(CEPH_DEV_PATH) + " osd-start " + own).c_str()), 0);
  Status again = Status(StatusCode::kUnavailable, "not tried");
  for (int attempt = 0; attempt < 20 && !again.ok(); ++attempt) {
    again = RetrieveAndCheck(MakeClient({gw}).get(), RetrievalMode::kAggregatedLayerwise);
    if (!again.ok()) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_TRUE(again.ok()) << again.ToString();
}

}  // namespace
}  // namespace objectcache
