// The RADOS backend against a real single-node Ceph (scripts/ceph-dev, started by the ctest
// fixture "ceph"; $OBJECTCACHE_TEST_CEPH names its directory).
#include "store/rados/rados_store.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <rados/librados.hpp>
#include <random>
#include <thread>

#include "core/seeded_data.h"
#include "objectcache/store_registry.h"
#include "store/memory/memory_store.h"
#include "store/store_conformance.h"

namespace objectcache {
namespace {

std::string CephDir() {
  const char* dir = std::getenv("OBJECTCACHE_TEST_CEPH");
  return dir ? dir : "";
}

std::string ConfPath() { return CephDir() + "/ceph.conf"; }

// Each test's objects in a namespace of its own, named after its scratch directory.
Result<std::unique_ptr<Store>> OpenForTest(const std::string& scratch_dir) {
  if (CephDir().empty()) {
    return FailedPreconditionError("OBJECTCACHE_TEST_CEPH is not set: run this test under ctest");
  }
  std::string ns = scratch_dir;
  for (char& c : ns) {
    if (c == '/') c = '_';
  }
  return OpenRadosStore({.pool = "objectcache", .conf_path = ConfPath(), .ns = ns});
}

// With a capacity it never reaches: usage accounting, access times and readers that assert
// oc.gen are on, and the store is still a store like any other.
Result<std::unique_ptr<Store>> OpenWithCapacityForTest(const std::string& scratch_dir) {
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> plain, OpenForTest(scratch_dir));
  const std::string ns = plain->Uri().substr(plain->Uri().find("namespace=") + 10);
  return OpenRadosStore({.pool = "objectcache",
                         .conf_path = ConfPath(),
                         .ns = ns + "-capacity",
                         .capacity_bytes = 1ull << 40});
}

INSTANTIATE_TEST_SUITE_P(Rados, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"rados", OpenForTest},
                                           StoreFactory{"rados_capacity", OpenWithCapacityForTest}),
                         [](const auto& param_info) { return param_info.param.name; });

class RadosStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CephDir().empty()) GTEST_SKIP() << "OBJECTCACHE_TEST_CEPH is not set: run under ctest";
    ns_ = "rados-test-" + std::to_string(getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::unique_ptr<Store> OpenUri(const std::string& uri) {
    Result<std::unique_ptr<Store>> s = OpenStore(uri);
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s.has_value() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<Store> Open(const std::string& ns) {
    return OpenUri("rados://objectcache?conf=" + ConfPath() + "&namespace=" + ns);
  }
  std::string ns_;
};

TEST_F(RadosStoreTest, NamespacesKeepTenantsApart) {
  auto a = Open(ns_ + "-a");
  auto b = Open(ns_ + "-b");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Put("shared-name", AsBytes("tenant a")).ok());
  ASSERT_TRUE(b->Put("shared-name", AsBytes("tenant b's value")).ok());
  ASSERT_TRUE(a->Put("only-a", AsBytes("x")).ok());
  EXPECT_EQ(*ReadWholeObject(*a, "shared-name"), "tenant a");
  EXPECT_EQ(*ReadWholeObject(*b, "shared-name"), "tenant b's value");
  EXPECT_EQ(b->Stat("only-a").status().code(), StatusCode::kNotFound);
  Result<ListPage> listed = b->List({});
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->objects.size(), 1u);
  EXPECT_EQ(listed->objects[0].key, "shared-name");
  EXPECT_EQ(listed->objects[0].size, 16u);
  ASSERT_TRUE(a->Delete("shared-name").ok());
  EXPECT_EQ(*ReadWholeObject(*b, "shared-name"), "tenant b's value");
}

// The `rados bench seq` reader of bench backends: every object whole, however many reads are in
// flight; a missing object fails the run naming it; only a RADOS store can run it.
TEST_F(RadosStoreTest, SequentialReadsBringEveryObjectWhole) {
  auto store = Open(ns_);
  ASSERT_TRUE(store);
  std::vector<std::string> names;
  uint64_t total = 0;
  for (int i = 0; i < 7; ++i) {
    names.push_back("object-" + std::to_string(i));
    const std::string value(1000 * (i + 1) + 5, static_cast<char>('a' + i));
    total += value.size();
    ASSERT_TRUE(store->Put(names.back(), AsBytes(value)).ok());
  }
  for (int in_flight : {1, 3, 16}) {
    Result<RadosSequentialRead> read = ReadRadosObjectsSequentially(*store, names, in_flight);
    ASSERT_TRUE(read.has_value()) << read.error().ToString();
    EXPECT_EQ(read->bytes, total) << in_flight;
    EXPECT_GE(read->seconds, 0) << in_flight;
  }
  names.insert(names.begin() + 3, "missing");
  Result<RadosSequentialRead> missing = ReadRadosObjectsSequentially(*store, names, 2);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.error().message().find("missing"), std::string::npos);
  EXPECT_EQ(ReadRadosObjectsSequentially(*store, names, 0).error().code(),
            StatusCode::kInvalidArgument);
  std::unique_ptr<Store> memory = NewMemoryStore();
  EXPECT_EQ(ReadRadosObjectsSequentially(*memory, names, 2).error().code(),
            StatusCode::kInvalidArgument);
}

// Range reads in place leave the bytes in librados's receive buffers: no copy into dest, and the
// buffers held for as long as the caller holds them (the bytes themselves: the conformance
// suite's RangesReadInPlaceStayAsReadWhileHeld).
TEST_F(RadosStoreTest, RangesReadInPlaceAreLentNotCopied) {
  auto store = Open(ns_);
  ASSERT_TRUE(store);
  const std::string value(3 << 20, 'k');
  ASSERT_TRUE(store->Put("lent", AsBytes(value)).ok());
  std::string a(65536, '\0'), b(65536, '\0');
  std::vector<RangeRead> reads = {{.key = "lent", .offset = 0, .dest = AsWritableBytes(a)},
                                  {.key = "lent", .offset = 2 << 20, .dest = AsWritableBytes(b)}};
  HeldMemory held;
  ASSERT_TRUE(store->RetrieveRangesInPlace(reads, &held).ok());
  for (const RangeRead& r : reads) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.data.size(), r.dest.size());
    EXPECT_NE(r.data.data(), r.dest.data());
  }
  EXPECT_FALSE(held.empty());
  EXPECT_EQ(a, std::string(65536, '\0'));  // dest untouched
  // Without a holder, the same reads are copied into dest.
  ASSERT_TRUE(store->RetrieveRanges(reads).ok());
  EXPECT_EQ(a, value.substr(0, 65536));
}

std::string Pattern(size_t n, std::string_view key) {
  return SeededBytes(n, std::hash<std::string_view>()(key));
}

// The namespace's bytes as a full listing sees them: the ground truth.
uint64_t ListedBytes(Store& store) {
  uint64_t bytes = 0;
  EXPECT_TRUE(ForEachObject(store, "", [&](const ObjectInfo& o) { bytes += o.size; }).ok());
  return bytes;
}

std::string CapacityUri(const std::string& ns, uint64_t capacity) {
  return "rados://objectcache?conf=" + ConfPath() + "&namespace=" + ns +
         "&capacity=" + std::to_string(capacity) + "&evict_interval_ms=100&atime_resolution=1";
}

TEST_F(RadosStoreTest, CapacityHoldsUnderAWriteStormFromTwoGateways) {
  constexpr uint64_t kCapacity = 4 << 20, kObject = 64 << 10;
  auto gateway_a = OpenUri(CapacityUri(ns_, kCapacity));
  auto gateway_b = OpenUri(CapacityUri(ns_, kCapacity));
  ASSERT_TRUE(gateway_a && gateway_b);
  Store* gateways[2] = {gateway_a.get(), gateway_b.get()};
  // 4x the capacity, from two writers on each gateway, while readers on both read what was
  // written: every read is the whole version or a clean miss.
  constexpr int kWriters = 4, kPerWriter = 64;
  std::atomic<int> written{0};
  std::atomic<uint64_t> hits{0}, misses{0}, failures{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        const std::string key = "w" + std::to_string(w) + "-" + std::to_string(i);
        ASSERT_TRUE(gateways[w % 2]->Put(key, AsBytes(Pattern(kObject, key))).ok());
        written++;
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(r);
      std::string buf(kObject, '\0');
      while (!done) {
        const int w = static_cast<int>(rng() % kWriters);
        const std::string key = "w" + std::to_string(w) + "-" + std::to_string(rng() % kPerWriter);
        Status s;
        if (rng() % 2) {
          RangeRead read{.key = key, .offset = 0, .dest = AsWritableBytes(buf)};
          s = gateways[r]->RetrieveRanges(std::span(&read, 1));
          if (s.ok()) s = read.status;
        } else {
          auto reader = gateways[r]->OpenReader(key);
          s = reader.has_value() ? (*reader)->ReadAt(0, AsWritableBytes(buf)) : reader.error();
        }
        if (s.ok()) {
          hits++;
          if (buf != Pattern(kObject, key)) failures++;
        } else if (s.code() == StatusCode::kNotFound) {
          misses++;
        } else {
          ADD_FAILURE() << key << ": " << s.ToString();
          failures++;
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  done = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  // Usage ends under the bound (the evictor runs every 100 ms; bounded wait).
  uint64_t listed = ListedBytes(*gateway_a);
  for (int i = 0; i < 300 && listed > kCapacity; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    listed = ListedBytes(*gateway_a);
  }
  EXPECT_LE(listed, kCapacity);
  EXPECT_GT(listed, kCapacity / 2);  // LRU eviction, not a purge
  // Both gateways account what the listing sees, once each has published and summed.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(gateway_a->Usage().bytes, ListedBytes(*gateway_a));
  EXPECT_EQ(gateway_b->Usage().bytes, ListedBytes(*gateway_b));
  EXPECT_GE(gateway_a->Usage().evictions + gateway_b->Usage().evictions,
            (kWriters * kPerWriter * kObject - kCapacity) / kObject);
  EXPECT_TRUE(gateway_a->Capabilities().evicts);
  EXPECT_EQ(gateway_a->Capabilities().capacity_bytes, kCapacity);
}

TEST_F(RadosStoreTest, PinnedObjectsSurviveEvictionUntilTheyExpire) {
  constexpr uint64_t kCapacity = 1 << 20, kObject = 128 << 10;
  auto store = OpenUri(CapacityUri(ns_, kCapacity));
  ASSERT_TRUE(store);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  ASSERT_TRUE(store->Put("system-prompt", AsBytes(Pattern(kObject, "system-prompt"))).ok());
  ASSERT_TRUE(store->Pin("system-prompt", now + 3600).ok());
  ASSERT_TRUE(store->Put("short-pin", AsBytes(Pattern(kObject, "short-pin"))).ok());
  ASSERT_TRUE(store->Pin("short-pin", now + 3).ok());
  auto pressure = [&](int from, int n) {
    for (int i = from; i < from + n; ++i) {
      const std::string key = "o" + std::to_string(i);
      ASSERT_TRUE(store->Put(key, AsBytes(Pattern(kObject, key))).ok());
    }
    for (int i = 0; i < 100 && ListedBytes(*store) > kCapacity; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  pressure(0, 32);  // 4x the capacity
  EXPECT_LE(ListedBytes(*store), kCapacity);
  EXPECT_EQ(*ReadWholeObject(*store, "system-prompt"), Pattern(kObject, "system-prompt"));
  EXPECT_TRUE(store->Stat("short-pin").has_value());
  // Past its time a pin no longer protects.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  for (int round = 0; round < 10 && store->Stat("short-pin").has_value(); ++round) {
    pressure(100 + round * 16, 16);
  }
  EXPECT_EQ(store->Stat("short-pin").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Stat("system-prompt").has_value());
}

TEST_F(RadosStoreTest, AnAccessTimeRefreshNeverFailsAReaderAReplacementAlways) {
  auto store = OpenUri(CapacityUri(ns_, 1ull << 30));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put("k", AsBytes("version one")).ok());
  auto reader = store->OpenReader("k");
  ASSERT_TRUE(reader.has_value());
  librados::Rados cluster;
  ASSERT_EQ(cluster.init("admin"), 0);
  ASSERT_EQ(cluster.conf_read_file(ConfPath().c_str()), 0);
  ASSERT_EQ(cluster.connect(), 0);
  librados::IoCtx io;
  ASSERT_EQ(cluster.ioctx_create("objectcache", io), 0);
  io.set_namespace(ns_);
  auto atime = [&] {
    librados::bufferlist bl;
    io.getxattr("k", "oc.atime", bl);
    return std::string(bl.c_str(), bl.length());
  };
  const std::string written_at = atime();
  // Stale after a second: the next read refreshes it (asynchronously).
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_TRUE(ReadWholeObject(*store, "k").has_value());
  for (int i = 0; i < 50 && atime() == written_at; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(atime(), written_at);
  std::string buf(11, '\0');
  ASSERT_TRUE((*reader)->ReadAt(0, AsWritableBytes(buf)).ok());
  EXPECT_EQ(buf, "version one");
  ASSERT_TRUE(store->Put("k", AsBytes("version two")).ok());
  EXPECT_EQ((*reader)->ReadAt(0, AsWritableBytes(buf)).code(), StatusCode::kAborted);
  cluster.shutdown();
}

TEST_F(RadosStoreTest, ObjectsOverTheLimitAreRefusedAndNothingIsStored) {
  auto store = Open(ns_);
  ASSERT_TRUE(store);
  std::string big(kMaxRadosObjectBytes + 1, 'z');
  EXPECT_EQ(store->Put("big", AsBytes(big)).code(), StatusCode::kResourceExhausted);
  Result<std::unique_ptr<ObjectWriter>> w = store->NewWriter("big-streamed");
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE((*w)->Append(AsBytes(std::string_view(big).substr(0, kMaxRadosObjectBytes))).ok());
  EXPECT_EQ((*w)->Append(AsBytes("z")).code(), StatusCode::kResourceExhausted);
  w->reset();
  EXPECT_EQ(store->Stat("big").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Stat("big-streamed").status().code(), StatusCode::kNotFound);
}

TEST_F(RadosStoreTest, BadUrisAndMissingPoolsAreClearErrors) {
  for (const char* uri : {"rados://", "rados://pool?conf", "rados://pool?color=red",
                          "rados://pool?timeout=0", "rados://pool?timeout=5s", "rados://a/b"}) {
    Result<std::unique_ptr<Store>> s = OpenStore(uri);
    ASSERT_FALSE(s.has_value()) << uri;
    EXPECT_EQ(s.error().code(), StatusCode::kInvalidArgument)
        << uri << ": " << s.error().ToString();
  }
  Result<std::unique_ptr<Store>> missing =
      OpenStore("rados://no-such-pool?conf=" + ConfPath() + "&timeout=10");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.error().message().find("no-such-pool"), std::string::npos);
  Result<std::unique_ptr<Store>> no_conf = OpenStore("rados://objectcache?conf=/nonexistent.conf");
  ASSERT_FALSE(no_conf.has_value());
  EXPECT_EQ(no_conf.error().code(), StatusCode::kNotFound) << no_conf.error().ToString();
}

TEST_F(RadosStoreTest, AnUnreachableClusterIsUnavailableWithinTheTimeout) {
  // A configuration naming a monitor port nobody listens on.
  const std::string conf = "/tmp/objectcache-rados-test-" + std::to_string(getpid()) + ".conf";
  {
    std::ofstream out(conf);
    out << "[global]\nmon host = 127.0.0.1:1\nauth client required = none\n";
  }
  Result<std::unique_ptr<Store>> s = OpenStore("rados://objectcache?conf=" + conf + "&timeout=2");
  std::remove(conf.c_str());
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), StatusCode::kUnavailable) << s.error().ToString();
}

}  // namespace
}  // namespace objectcache
