#include "store/quota_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "store/memory/memory_store.h"
#include "store/store_conformance.h"

namespace objectcache {
namespace {

// Under a quota it never reaches, a QuotaStore is a store like any other.
INSTANTIATE_TEST_SUITE_P(QuotaOverMemory, StoreConformanceTest,
                         ::testing::Values(StoreFactory{
                             "quota_over_memory",
                             [](const std::string&) -> Result<std::unique_ptr<Store>> {
                               OC_ASSIGN_OR_RETURN(auto s,
                                                   NewQuotaStore(NewMemoryStore(), 1ull << 40));
                               return std::unique_ptr<Store>(std::move(s));
                             }}),
                         [](const auto& param_info) { return param_info.param.name; });

std::unique_ptr<QuotaStore> Quota(uint64_t bytes) {
  return *NewQuotaStore(NewMemoryStore(), bytes);
}

constexpr uint64_t kBlock = kObjectFootprintBytes;

TEST(QuotaStoreTest, AWriteOverTheQuotaFailsAndChangesNothing) {
  // Each object costs its payload and a block.
  auto store = Quota(2 * kBlock + 1000);
  ASSERT_TRUE(store->Put("a", AsBytes(std::string(600, 'a'))).ok());
  Status s = store->Put("b", AsBytes(std::string(401, 'b')));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.message().starts_with(kQuotaExceeded)) << s.ToString();
  EXPECT_EQ(s.reason(), StatusReason::kQuotaExceeded);
  EXPECT_EQ(s.Annotate("storing").reason(), StatusReason::kQuotaExceeded);
  EXPECT_EQ(store->Stat("b").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->rejections(), 1u);
  // Exactly up to the quota is fine; one byte past it is not.
  EXPECT_TRUE(store->Put("b", AsBytes(std::string(400, 'b'))).ok());
  EXPECT_EQ(store->Usage().bytes, 1000u);
  EXPECT_FALSE(store->Put("c", AsBytes(std::string(1, 'c'))).ok());
  EXPECT_FALSE(store->Put("c", {}).ok());  // an empty object costs its block
  // Streaming writes are checked at commit, when their size is known.
  auto w = store->NewWriter("d");
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE((*w)->Append(AsBytes(std::string(10, 'd'))).ok());
  EXPECT_EQ((*w)->Commit().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Stat("d").error().code(), StatusCode::kNotFound);
  // One that outgrows the whole quota is refused on that append: an upload in flight never
  // holds more than the quota.
  auto big = store->NewWriter("e");
  ASSERT_TRUE(big.has_value());
  const uint64_t room = store->quota() - kBlock;
  ASSERT_TRUE((*big)->Append(AsBytes(std::string(room - 1, 'e'))).ok());
  ASSERT_TRUE((*big)->Append(AsBytes(std::string(1, 'e'))).ok());
  const Status over = (*big)->Append(AsBytes(std::string(1, 'e')));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(over.message().starts_with(kQuotaExceeded)) << over.ToString();
  EXPECT_EQ(over.reason(), StatusReason::kQuotaExceeded);
  EXPECT_EQ((*big)->bytes_written(), room);
  EXPECT_EQ(store->Stat("e").error().code(), StatusCode::kNotFound);
  // A quota below one block holds nothing; one block holds one empty object; u64 max, anything.
  auto none = Quota(kBlock - 1);
  EXPECT_FALSE(none->Put("zero", {}).ok());
  auto one = Quota(kBlock);
  EXPECT_TRUE(one->Put("zero", {}).ok());
  EXPECT_FALSE(one->Put("one", AsBytes("x")).ok());
  auto all = Quota(UINT64_MAX);
  EXPECT_TRUE(all->Put("x", AsBytes(std::string(100, 'x'))).ok());
}

TEST(QuotaStoreTest, EmptyObjectsAreNotFree) {
  // What the disk holds is bounded, not only the payload: 1 MiB holds 256 empty objects.
  auto store = Quota(1 << 20);
  int stored = 0;
  for (int i = 0; i < 10000 && store->Put("e" + std::to_string(i), {}).ok(); ++i) ++stored;
  EXPECT_EQ(stored, (1 << 20) / static_cast<int>(kBlock));
  EXPECT_EQ(store->Usage().objects, static_cast<uint64_t>(stored));
}

TEST(QuotaStoreTest, ReplacingCountsOnlyTheGrowthAndDeletesFreeRoom) {
  auto store = Quota(kBlock + 1000);
  ASSERT_TRUE(store->Put("a", AsBytes(std::string(900, 'a'))).ok());
  EXPECT_TRUE(store->Put("a", AsBytes(std::string(950, 'a'))).ok());
  EXPECT_FALSE(store->Put("a", AsBytes(std::string(1001, 'a'))).ok());
  EXPECT_FALSE(store->Put("b", AsBytes(std::string(100, 'b'))).ok());
  ASSERT_TRUE(store->Delete("a").ok());
  EXPECT_TRUE(store->Put("b", AsBytes(std::string(1000, 'b'))).ok());
  store->SetQuota(2 * kBlock + 2000);
  EXPECT_TRUE(store->Put("c", AsBytes(std::string(1000, 'c'))).ok());
  EXPECT_EQ(store->quota(), 2 * kBlock + 2000);
}

TEST(QuotaStoreTest, ConcurrentWritersNeverPassTheQuotaTogether) {
  auto store = Quota(64 * (1000 + kBlock));
  std::atomic<int> committed{0}, refused{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        auto w = store->NewWriter("w" + std::to_string(t) + "-" + std::to_string(i));
        ASSERT_TRUE(w.has_value());
        for (int k = 0; k < 10; ++k) ASSERT_TRUE((*w)->Append(AsBytes(std::string(100, 'x'))).ok());
        Status s = (*w)->Commit();
        if (s.ok()) {
          committed++;
        } else {
          ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
          refused++;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(committed.load(), 64);
  EXPECT_EQ(refused.load(), 8 * 40 - 64);
  EXPECT_EQ(store->Usage().bytes, 64u * 1000);
}

TEST(QuotaStoreTest, NeedsAStoreThatTracksUsage) {
  class Untracked final : public Store {
   public:
    StoreCapabilities Capabilities() const override { return {.tracks_usage = false}; }
    StoreUsage Usage() const override { return {}; }
    std::string Uri() const override { return "untracked://"; }
    Status Put(std::string_view, std::span<const std::byte>, const PutOptions&) override {
      return Status();
    }
    Result<ObjectInfo> Stat(std::string_view) override { return NotFoundError("x"); }
    Result<size_t> Retrieve(std::string_view, std::span<std::byte>) override {
      return NotFoundError("x");
    }
    Status RetrieveRanges(std::span<RangeRead>) override { return Status(); }
    using Store::Exist;
    Result<std::vector<bool>> Exist(std::span<const std::string_view>) override {
      return std::vector<bool>{};
    }
    Status Delete(std::string_view) override { return Status(); }
    Result<ListPage> List(const ListOptions&) override { return ListPage{}; }
    Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view, const PutOptions&) override {
      return UnimplementedError("x");
    }
    Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view) override {
      return NotFoundError("x");
    }
  };
  auto s = NewQuotaStore(std::make_unique<Untracked>(), 10);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message().find("untracked://"), std::string::npos);
}

}  // namespace
}  // namespace objectcache
