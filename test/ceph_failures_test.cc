// Failures of a replicated Ceph cluster under `objectcache serve --store rados://...` gateways,
// each while work is in flight: an OSD killed during a layerwise retrieval, a gateway killed
// mid-stream, and a storm of OSD kills and restarts under a write load. The cluster comes from
// the ctest fixture "ceph3" ($OBJECTCACHE_TEST_CEPH3: scripts/ceph-dev with 3 bluestore OSDs,
// pools of 3 replicas, writes going on with 2), which only these tests use, one at a time, so
// that killing its daemons disturbs no other test. Each test prints what it measured.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "core/seeded_data.h"
#include "objectcache/client.h"
#include "s3/s3_connection.h"
#include "test/server_process.h"
#include "test/support/ceph_gateways.h"

namespace objectcache {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Status Shell(const std::string& cmd) {
  return std::system(cmd.c_str()) == 0 ? Status() : InternalError("failed: " + cmd);
}

Status CephDev(const std::string& args) { return Shell(std::string(CEPH_DEV_PATH) + " " + args); }

// A 16K-token prefix in a narrow layout (32 layers, 1 KV head of 64, bf16: 8 KiB a token, 128
// MiB a prefix, 1024 chunk objects of 128 KiB), so that three replicas of it fit this machine's
// disk time; the retrieval's shape (layers, chunks, requests) is a full-size model's.
const ModelPreset kModel{"ceph-failures-16k", {32, 1, 64, KvDtype::kBf16, 16}};
constexpr size_t kPrefixTokens = 16384;

class CephFailuresTest : public test_support::CephGatewayFixture {
 protected:
  CephFailuresTest() : CephGatewayFixture("OBJECTCACHE_TEST_CEPH3", "failures", kModel) {}
  void TearDown() override {
    if (!dir_.empty()) {
      gateways_.clear();
      // Every OSD up again for the next test (osd-start refuses one that runs).
      for (int i = 0; i < 3; ++i) {
        (void)CephDev("osd-start " + cluster_ + " " + std::to_string(i) + " 2>/dev/null");
      }
    }
    CephGatewayFixture::TearDown();
  }

  // `ceph ARGS` against the cluster.
  Status Ceph(const std::string& args) {
    return Shell("ceph -c " + cluster_ + "/ceph.conf " + args + " >/dev/null 2>&1");
  }

  // Starts a gateway over `pool`; reads of at most 4 MiB a window, so a retrieval reads the
  // cluster all along its stream, not all at its start.
  std::string StartGateway(const std::string& pool = "objectcache") {
    return CephGatewayFixture::StartGateway(RadosUri(cluster_, pool),
                                            {"--layerwise-window", "4MiB"});
  }

  // A KV bucket of kModel's layout, or with `plain` one for any S3 object.
  void CreateBucket(const std::string& endpoint, const std::string& bucket, bool plain = false) {
    CephGatewayFixture::CreateBucket(endpoint, bucket, plain ? "" : ModelToJson(kModel));
  }

  std::unique_ptr<Client> MakeClient(std::vector<std::string> endpoints, bool failover = false) {
    auto c = Client::Create({.endpoints = std::move(endpoints),
                             .bucket = "kvc",
                             .timeout = std::chrono::seconds(60),
                             .retries = 3,
                             .failover = failover,
                             .aggregated_streams = 1});
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }

  // The 16K-token prefix, stored through `writer`.
  void StorePrefix(Client* writer) {
    CephGatewayFixture::StorePrefix(writer, kPrefixTokens / kModel.layout.tokens_per_chunk, 7, 64);
  }

  // What one aggregated retrieval of the whole prefix saw.
  struct Outcome {
    Status status;
    std::vector<uint32_t> layers_reported;  // in the order on_layer reported them
    double seconds = 0;  // from the start, or from the end of at_layer0 when it is given
  };

  // Retrieves every layer and checks every byte; with `at_layer0`, the receiver is held in its
  // layer-0 report while at_layer0() runs (the failure), then goes on.
  Outcome Retrieve(Client* reader, const std::function<void()>& at_layer0 = {}) {
    std::vector<std::string> regions;
    LayerwiseRequest req = RequestInto(&regions);
    Outcome out;
    std::mutex mu;
    req.mode = RetrievalMode::kAggregatedLayerwise;
    Clock::time_point from = Clock::now();
    req.on_layer = [&](uint32_t layer, const Status& s) {
      if (!s.ok()) return;
      {
        std::lock_guard lock(mu);
        out.layers_reported.push_back(layer);
      }
      if (layer == 0 && at_layer0) {
        at_layer0();
        from = Clock::now();
      }
    };
    auto retrieval = reader->RetrieveLayerwise(std::move(req));
    if (!retrieval) return {retrieval.error()};
    out.status = (*retrieval)->Wait();
    out.seconds = SecondsSince(from);
    if (out.status.ok()) out.status = CheckRetrieved(**retrieval, regions);
    return out;
  }
};

// Every layer reported once, in order.
void ExpectEachLayerOnceInOrder(const std::vector<uint32_t>& reported, uint32_t layers) {
  ASSERT_EQ(reported.size(), layers);
  for (uint32_t l = 0; l < layers; ++l) EXPECT_EQ(reported[l], l);
}

TEST_F(CephFailuresTest, AnOsdKilledDuringARetrievalCostsADelayNeverAWrongByte) {
  const std::string gw = StartGateway();
  CreateBucket(gw, "kvc");
  StorePrefix(MakeClient({gw}).get());
  auto reader = MakeClient({gw});
  // The same retrieval without a failure, timed the same way: from its layer-0 report.
  const Outcome calm = Retrieve(reader.get(), [] {});
  ASSERT_TRUE(calm.status.ok()) << calm.status.ToString();

  // Held at layer 0 while osd.1 is killed; the rest of the stream reads a cluster that has
  // lost a replica (librados sends each read to the PG's new primary once the monitor has
  // marked the OSD down).
  const uint64_t retries_before = reader->Stats().retries;
  Outcome hit =
      Retrieve(reader.get(), [&] { ASSERT_TRUE(CephDev("osd-kill " + cluster_ + " 1").ok()); });
  int retrievals = 1;
  // A failure must be a clean, retryable one; the client's retry then completes.
  while (!hit.status.ok() && hit.status.code() == StatusCode::kUnavailable && retrievals < 3) {
    std::printf("retrieval failed cleanly (%s); retrying\n", hit.status.ToString().c_str());
    hit = Retrieve(reader.get());
    ++retrievals;
  }
  ASSERT_TRUE(hit.status.ok()) << hit.status.ToString();
  ExpectEachLayerOnceInOrder(hit.layers_reported, kModel.layout.num_layers);
  std::printf(
      "osd.1 killed mid-retrieval (16K tokens, 128 MiB): %.2f s from the kill to the last layer, "
      "%.2f s from the same point without it (added %.2f s); %d retrieval(s), %llu request "
      "retries\n",
      hit.seconds, calm.seconds, hit.seconds - calm.seconds, retrievals,
      static_cast<unsigned long long>(reader->Stats().retries - retries_before));

  // Back with a replica missing, and once it has returned.
  EXPECT_TRUE(Retrieve(reader.get()).status.ok());
  ASSERT_TRUE(CephDev("osd-start " + cluster_ + " 1").ok());
  EXPECT_TRUE(Retrieve(reader.get()).status.ok());
}

TEST_F(CephFailuresTest, AGatewayKilledMidStreamFailsOverToTheOther) {
  const std::string a = StartGateway(), b = StartGateway();
  CreateBucket(a, "kvc");
  auto both = MakeClient({a, b}, /*failover=*/true);
  StorePrefix(both.get());
  const Outcome calm = Retrieve(both.get(), [] {});
  ASSERT_TRUE(calm.status.ok()) << calm.status.ToString();

  // Gateway a dies while its part of the stream is under way.
  const uint64_t retries_before = both->Stats().retries;
  const Outcome hit = Retrieve(both.get(), [&] { gateways_[0]->Stop(SIGKILL); });
  ASSERT_TRUE(hit.status.ok()) << hit.status.ToString();
  // Resumed at b from the first layer a had not delivered: nothing handed over twice.
  ExpectEachLayerOnceInOrder(hit.layers_reported, kModel.layout.num_layers);
  const uint64_t retries = both->Stats().retries - retries_before;
  EXPECT_GE(retries, 1u);
  std::printf(
      "gateway killed mid-stream: %.2f s from the kill to the last layer, %.2f s from the same "
      "point without it (added %.2f s); %llu request retries\n",
      hit.seconds, calm.seconds, hit.seconds - calm.seconds,
      static_cast<unsigned long long>(retries));
  // New requests go on through the survivor, the dead endpoint still in the list.
  const Outcome after = Retrieve(both.get());
  EXPECT_TRUE(after.status.ok()) << after.status.ToString();
  EXPECT_EQ(*both->Lookup(keys_), keys_.size());
}

TEST_F(CephFailuresTest, AStormOfOsdKillsLosesNoAcknowledgedWrite) {
  const std::string gw = StartGateway();
  CreateBucket(gw, "storm", /*plain=*/true);
  // Two writers PUT objects of 64 KiB to 1 MiB while OSDs are killed and restarted, one at a
  // time; each remembers what the gateway acknowledged (200).
  struct Written {
    std::string name;
    uint64_t seed;
    size_t bytes;
  };
  std::mutex mu;
  std::vector<Written> acknowledged;
  std::atomic<uint64_t> refused{0}, sent{0};
  std::atomic<bool> stop{false};
  // The writers together send at most 16 MiB a second, so that three replicas of what they
  // write fit the cluster (3 OSDs of 3 GiB) however long the restarts take: unpaced, two writers
  // put 2.2 GiB in a storm of 47 s, and a slower storm filled the OSDs.
  constexpr double kBytesPerSecond = 16 << 20;
  const Clock::time_point begun = Clock::now();
  auto writer = [&](int w) {
    auto conn = std::make_unique<s3::S3Connection>(*s3::S3Endpoint::Parse(gw), s3::S3Credentials{});
    std::mt19937_64 rng(100 + w);
    for (uint64_t n = 0; !stop.load(); ++n) {
      Written o{"w" + std::to_string(w) + "-" + std::to_string(n), rng(),
                size_t{64} << 10 << (rng() % 5)};
      while (!stop.load() && sent.load() > kBytesPerSecond * SecondsSince(begun)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (stop.load()) break;
      sent += o.bytes;
      auto res = conn->Send("PUT", "/storm/" + o.name, {}, SeededBytes(o.bytes, o.seed),
                            [](auto) { return Status(); });
      if (res.has_value() && res->status == 200) {
        std::lock_guard lock(mu);
        acknowledged.push_back(o);
      } else {
        refused.fetch_add(1);
        if (!res.has_value()) {
          conn =
              std::make_unique<s3::S3Connection>(*s3::S3Endpoint::Parse(gw), s3::S3Credentials{});
        }
      }
    }
  };
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) writers.emplace_back(writer, w);
  // Six rounds: an OSD killed, writes for 2 s without it, started again (waiting until the
  // monitor has it up), 1 s whole.
  const Clock::time_point storm = Clock::now();
  for (int round = 0; round < 6; ++round) {
    const std::string osd = std::to_string(round % 3);
    ASSERT_TRUE(CephDev("osd-kill " + cluster_ + " " + osd).ok());
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ASSERT_TRUE(CephDev("osd-start " + cluster_ + " " + osd).ok());
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  stop = true;
  for (std::thread& t : writers) t.join();
  const double storm_s = SecondsSince(storm);

  // The cluster whole again: every acknowledged object is there, byte for byte.
  s3::S3Connection conn(*s3::S3Endpoint::Parse(gw), s3::S3Credentials{});
  size_t lost = 0, damaged = 0;
  for (const Written& o : acknowledged) {
    std::string body;
    auto res = conn.Send("GET", "/storm/" + o.name, {}, "", [&](std::span<const std::byte> b) {
      body.append(reinterpret_cast<const char*>(b.data()), b.size());
      return Status();
    });
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    if (res->status == 404) {
      ++lost;
    } else if (res->status != 200 || body != SeededBytes(o.bytes, o.seed)) {
      ++damaged;
    }
  }
  std::printf(
      "OSD kill storm: 6 kills and restarts in %.1f s; %zu writes acknowledged, %llu refused "
      "or cut; %zu lost, %zu damaged\n",
      storm_s, acknowledged.size(), static_cast<unsigned long long>(refused.load()), lost, damaged);
  EXPECT_GT(acknowledged.size(), 0u);
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(damaged, 0u);
}

TEST_F(CephFailuresTest, AFullPoolRefusesWritesWith507AtOnceWhileReadsGoOn) {
  // A pool of its own with a quota of 40 objects (the manager reports usage; the monitor marks
  // the pool full a few seconds after it passes the quota).
  const std::string pool = "quota-" + std::to_string(getpid());
  ASSERT_TRUE(Ceph("osd pool create " + pool + " 8 8").ok());
  ASSERT_TRUE(Ceph("osd pool application enable " + pool + " objectcache").ok());
  struct DropPool {
    std::string command;
    ~DropPool() { (void)Shell(command); }
  } drop{"ceph -c " + cluster_ + "/ceph.conf osd pool delete " + pool + " " + pool +
         " --yes-i-really-really-mean-it >/dev/null 2>&1"};
  ASSERT_TRUE(Ceph("osd pool set-quota " + pool + " max_objects 40").ok());
  const std::string gw = StartGateway(pool);
  CreateBucket(gw, "full", /*plain=*/true);
  s3::S3Connection conn(*s3::S3Endpoint::Parse(gw), s3::S3Credentials{});
  auto put = [&](const std::string& name) {
    return conn.Send("PUT", "/full/" + name, {}, std::string(64 << 10, name.back()),
                     [](auto) { return Status(); });
  };
  // Writes until the pool is marked full: then 507, answered at once (not after the gateway's
  // 30 s operation timeout).
  std::vector<std::string> stored;
  const Clock::time_point start = Clock::now();
  double refused_in_s = 0;
  for (int i = 0; SecondsSince(start) < 120; ++i) {
    const std::string name = "o" + std::to_string(i);
    const Clock::time_point sent = Clock::now();
    auto res = put(name);
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    if (res->status == 507) {
      refused_in_s = SecondsSince(sent);
      EXPECT_NE(res->error_body.find("InsufficientStorage"), std::string::npos) << res->error_body;
      break;
    }
    ASSERT_EQ(res->status, 200u) << res->error_body;
    stored.push_back(name);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(refused_in_s, 0) << "no 507 within 120 s";
  EXPECT_LT(refused_in_s, 10);
  EXPECT_GE(stored.size(), 40u);
  // Reads go on, every byte as written; further writes are refused the same way.
  for (const std::string& name : stored) {
    std::string body;
    auto res = conn.Send("GET", "/full/" + name, {}, "", [&](std::span<const std::byte> b) {
      body.append(reinterpret_cast<const char*>(b.data()), b.size());
      return Status();
    });
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    EXPECT_EQ(res->status, 200u);
    EXPECT_EQ(body, std::string(64 << 10, name.back())) << name;
  }
  auto again = put("after-full");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->status, 507u);
  // A delete frees room even while the pool is full.
  auto del = conn.Send("DELETE", "/full/" + stored.front(), {}, "", [](auto) { return Status(); });
  ASSERT_TRUE(del.has_value());
  EXPECT_EQ(del->status, 204u) << del->error_body;
  std::printf(
      "pool quota of 40 objects: %zu writes acknowledged, then 507 in %.3f s; reads of "
      "all of them whole\n",
      stored.size(), refused_in_s);
  // The quota lifted: writes are taken again once the monitor clears the flag.
  ASSERT_TRUE(Ceph("osd pool set-quota " + pool + " max_objects 0").ok());
  unsigned status = 0;
  for (int i = 0; i < 120 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto res = put("after-lift");
    status = res.has_value() ? res->status : 0;
  }
  EXPECT_EQ(status, 200u);
}

}  // namespace
}  // namespace objectcache
