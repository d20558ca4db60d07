// The RADOS backend against a real single-node Ceph (scripts/ceph-dev, started by the ctest
// fixture "ceph"; $OBJECTCACHE_TEST_CEPH names its directory).
#include "store/rados/rados_store.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "objectcache/store_registry.h"
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

INSTANTIATE_TEST_SUITE_P(Rados, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"rados", OpenForTest}),
                         [](const auto& param_info) { return param_info.param.name; });

class RadosStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CephDir().empty()) GTEST_SKIP() << "OBJECTCACHE_TEST_CEPH is not set: run under ctest";
    ns_ = "rados-test-" + std::to_string(getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::unique_ptr<Store> Open(const std::string& ns) {
    Result<std::unique_ptr<Store>> s =
        OpenStore("rados://objectcache?conf=" + ConfPath() + "&namespace=" + ns);
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s.has_value() ? std::move(*s) : nullptr;
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
