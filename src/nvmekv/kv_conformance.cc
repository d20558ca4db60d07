#include "nvmekv/kv_conformance.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>

namespace objectcache::nvmekv {

std::string UniqueShmName() {
  static std::atomic<int> n{0};
  return "objectcache-test-" + std::to_string(getpid()) + "-" + std::to_string(n.fetch_add(1));
}

Key TestKey(std::string_view text) {
  return *Key::FromBytes(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string TestValue(size_t n, uint32_t seed) {
  std::string v(n, '\0');
  uint32_t x = seed * 2654435761u + static_cast<uint32_t>(n) + 1;
  for (char& c : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return v;
}

Result<TestDevice> StartTestDevice(Store* store, ControllerOptions options,
                                   HostOptions host_options) {
  options.shm_name = UniqueShmName();
  TestDevice d;
  OC_ASSIGN_OR_RETURN(d.controller, Controller::Start(store, options));
  host_options.shm_name = options.shm_name;
  OC_ASSIGN_OR_RETURN(d.host, Host::Attach(host_options));
  return d;
}

void NvmeKvConformanceTest::SetUp() {
  dir_ = MakeScratchDir();
  auto s = GetParam().open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(*s);
  ControllerOptions options;
  options.data_bytes = 16 << 20;
  options.max_value_bytes = 4 << 20;
  options.workers = 4;
  auto d = StartTestDevice(store_.get(), options, {.io_queues = 2, .queue_entries = 64});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  device_ = std::move(*d);
}

void NvmeKvConformanceTest::TearDown() {
  device_.Stop();
  store_.reset();
  RemoveTree(dir_);
}

// Store, Retrieve, Exist, Delete and the vendor Retrieve Range give the same answers on every
// store, and Retrieve returns every byte that was stored.
TEST_P(NvmeKvConformanceTest, StoreRetrieveExistDelete) {
  QueuePair& q = device_.host->io_queue(0);
  auto value = device_.host->Allocate(300000);
  auto out = device_.host->Allocate(300000);
  ASSERT_TRUE(value.ok() && out.ok());
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{65536}, size_t{300000}}) {
    Key key = TestKey("conf-" + std::to_string(size));
    std::string v = TestValue(size, 7);
    std::memcpy(value->bytes().data(), v.data(), size);
    ASSERT_TRUE(KvStore(q, key, *value, static_cast<uint32_t>(size)).ok()) << size;
    auto exist = KvExist(q, key);
    ASSERT_TRUE(exist.ok() && *exist);
    std::memset(out->bytes().data(), 0, out->bytes().size());
    auto got = KvRetrieve(q, key, *out, 300000);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, size);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(out->bytes().data()), size), v);
    if (size >= 4096) {
      auto n = KvRetrieveRange(q, key, *out, 1000, size - 3000);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      EXPECT_EQ(*n, 1000u);
      EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(out->bytes().data()), 1000),
                v.substr(size - 3000, 1000));
      n = KvRetrieveRange(q, key, *out, 5000, size - 3000);  // the value ends first
      ASSERT_TRUE(n.ok());
      EXPECT_EQ(*n, 3000u);
      for (uint64_t past : {uint64_t{size} + 1, UINT64_MAX - 10, UINT64_MAX}) {
        EXPECT_EQ(KvRetrieveRange(q, key, *out, 100, past).status().code(),
                  StatusCode::kInvalidArgument)
            << past;
      }
    }
  }
  Key key = TestKey("conf-4096");
  ASSERT_TRUE(KvDelete(q, key).ok());
  auto exist = KvExist(q, key);
  ASSERT_TRUE(exist.ok());
  EXPECT_FALSE(*exist);
  EXPECT_EQ(KvRetrieve(q, key, *out, 4096).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(KvDelete(q, key).ok());  // a missing key: success unless configured otherwise
  // Store options: create only, update only.
  EXPECT_EQ(KvStore(q, TestKey("conf-1"), *value, 1, kv::kStoreCreateOnly).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(KvStore(q, key, *value, 1, kv::kStoreUpdateOnly).code(), StatusCode::kNotFound);
  EXPECT_TRUE(KvStore(q, key, *value, 1, kv::kStoreCreateOnly).ok());
  EXPECT_TRUE(KvStore(q, key, *value, 2, kv::kStoreUpdateOnly).ok());
  auto size = KvRetrieve(q, key, *out, 0);  // a buffer of none: the size alone
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 2u);
}

// List returns keys from the given one, in byte order, whole keys only, over every store.
TEST_P(NvmeKvConformanceTest, ListInByteOrderFromAKey) {
  QueuePair& q = device_.host->io_queue(1);
  auto value = device_.host->Allocate(16);
  auto buf = device_.host->Allocate(4096);
  ASSERT_TRUE(value.ok() && buf.ok());
  std::set<std::string> names;
  for (int i = 0; i < 40; ++i) {
    std::string k = "list-" + std::to_string(i);
    names.insert(TestKey(k).ToHex());
    ASSERT_TRUE(KvStore(q, TestKey(k), *value, 16).ok());
  }
  auto all = KvList(q, TestKey("\x01"), *buf, 4096);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<std::string> got;
  for (const Key& k : *all) got.push_back(k.ToHex());
  EXPECT_EQ(got, std::vector<std::string>(names.begin(), names.end()));
  // From a stored key: it comes first.
  auto from = KvList(q, TestKey("list-3"), *buf, 4096);
  ASSERT_TRUE(from.ok());
  ASSERT_FALSE(from->empty());
  EXPECT_EQ(from->front(), TestKey("list-3"));
  EXPECT_EQ(from->size(),
            static_cast<size_t>(std::distance(names.find(TestKey("list-3").ToHex()), names.end())));
  // A small buffer: only whole keys ("list-N" is 6 or 7 bytes: 8 or 12 bytes each).
  auto some = KvList(q, TestKey("\x01"), *buf, 4 + 8 * 3 + 4);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->size(), 3u);
}

}  // namespace objectcache::nvmekv
