#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "objectcache/kv_pool.h"

namespace objectcache {
namespace {

constexpr uint64_t kPage = 2 << 20, kBlock = 64 << 10, kPerPage = kPage / kBlock;

std::unique_ptr<ElasticPool> MakePool(ElasticPoolOptions o = {}) {
  o.block_bytes = kBlock;
  if (o.reserve_bytes == ElasticPoolOptions().reserve_bytes) o.reserve_bytes = 64 * kPage;
  auto pool = ElasticPool::Create(*NewHostPageBackend(), o);
  EXPECT_TRUE(pool.has_value()) << pool.error().ToString();
  return std::move(*pool);
}

// Shared memory this process has mapped in (the memfd pages), from /proc/self/status.
uint64_t RssShmemBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("RssShmem:")) return std::stoull(line.substr(9)) * 1024;
  }
  return 0;
}

void Fill(std::byte* p, uint64_t seed) {
  for (uint64_t i = 0; i < kBlock; i += 8) {
    const uint64_t v = seed * 1000003 + i;
    std::memcpy(p + i, &v, 8);
  }
}
bool Holds(const std::byte* p, uint64_t seed) {
  for (uint64_t i = 0; i < kBlock; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    if (v != seed * 1000003 + i) return false;
  }
  return true;
}

TEST(ElasticPoolTest, BlocksAreDistinctWritableAndMappedAhead) {
  auto pool = MakePool({.min_spare_pages = 1, .max_spare_pages = 2});
  auto blocks = pool->Allocate(100);
  ASSERT_TRUE(blocks.has_value()) << blocks.error().ToString();
  std::set<BlockId> distinct(blocks->begin(), blocks->end());
  EXPECT_EQ(distinct.size(), 100u);
  for (BlockId b : *blocks) Fill(pool->Address(b), b);
  for (BlockId b : *blocks) EXPECT_TRUE(Holds(pool->Address(b), b));
  pool->Settle();
  ElasticPoolStats st = pool->Stats();
  EXPECT_EQ(st.used_blocks, 100u);
  // 100 blocks need 4 pages; one more page's worth is kept ready ahead of demand.
  EXPECT_GE(st.free_mapped_blocks, kPerPage);
  EXPECT_EQ(st.mapped_pages * kPerPage, st.used_blocks + st.free_mapped_blocks);
  pool->Free(*blocks);
}

TEST(ElasticPoolTest, LimitIsHonouredAndAFailedAllocationTakesNothing) {
  auto pool = MakePool({.limit_bytes = 4 * kPage});
  auto too_many = pool->Allocate(4 * kPerPage + 1, std::chrono::milliseconds(200));
  EXPECT_EQ(too_many.error().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Stats().used_blocks, 0u);
  auto all = pool->Allocate(4 * kPerPage);
  ASSERT_TRUE(all.has_value()) << all.error().ToString();
  EXPECT_FALSE(pool->Allocate(1, std::chrono::milliseconds(100)).has_value());
  EXPECT_EQ(pool->Stats().mapped_pages, 4u);
  // Lowering the limit cannot take used pages; it takes them as they fall free.
  pool->SetLimit(2 * kPage);
  pool->Settle();
  EXPECT_EQ(pool->Stats().mapped_pages, 4u);
  pool->Free(*all);
  pool->Settle();
  EXPECT_LE(pool->Stats().mapped_pages, 2u);
  // Raised again, it grows again.
  pool->SetLimit(8 * kPage);
  auto more = pool->Allocate(6 * kPerPage);
  ASSERT_TRUE(more.has_value()) << more.error().ToString();
  pool->Free(*more);
}

TEST(ElasticPoolTest, ManyCyclesLeakNoPageAndReturnMemoryToTheOs) {
  const uint64_t before = RssShmemBytes();
  {
    auto pool = MakePool({.min_spare_pages = 1, .max_spare_pages = 2});
    std::mt19937_64 rng(5);
    std::vector<BlockId> held;
    for (int cycle = 0; cycle < 300; ++cycle) {
      if (held.size() < 400 && rng() % 2) {
        auto got = pool->Allocate(1 + rng() % 64);
        ASSERT_TRUE(got.has_value()) << got.error().ToString();
        for (BlockId b : *got) std::memset(pool->Address(b), 0x5a, 4096);  // touch
        held.insert(held.end(), got->begin(), got->end());
      } else if (!held.empty()) {
        const size_t n = 1 + rng() % held.size();
        std::shuffle(held.begin(), held.end(), rng);
        pool->Free(std::span(held).last(n));
        held.resize(held.size() - n);
      }
    }
    pool->Free(held);
    pool->Settle();
    ElasticPoolStats st = pool->Stats();
    EXPECT_EQ(st.used_blocks, 0u);
    EXPECT_LE(st.mapped_pages, 2u);  // the warm spares, no more
    EXPECT_EQ(st.maps - st.unmaps, st.mapped_pages);
    EXPECT_GT(st.unmaps, 0u);
    EXPECT_LE(RssShmemBytes(), before + 3 * kPage);
  }
  EXPECT_LE(RssShmemBytes(), before + kPage);  // the destructor gives back the rest
}

TEST(ElasticPoolTest, PoolsSharingABudgetNeverExceedIt) {
  PhysicalBudget budget(8 * kPage);
  auto a = MakePool({.min_spare_pages = 0, .max_spare_pages = 1, .budget = &budget});
  auto b = MakePool({.min_spare_pages = 0, .max_spare_pages = 1, .budget = &budget});
  // One pool holds 6 pages: the other gets at most 2.
  auto big = a->Allocate(6 * kPerPage);
  ASSERT_TRUE(big.has_value()) << big.error().ToString();
  EXPECT_FALSE(b->Allocate(3 * kPerPage, std::chrono::milliseconds(200)).has_value());
  auto small = b->Allocate(2 * kPerPage);
  ASSERT_TRUE(small.has_value()) << small.error().ToString();
  a->Free(*big);
  b->Free(*small);
  // Both churn at once; the budget is never exceeded.
  std::atomic<bool> over{false};
  auto churn = [&](ElasticPool* pool, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<BlockId> held;
    for (int i = 0; i < 400; ++i) {
      if (rng() % 2) {
        auto got = pool->Allocate(1 + rng() % 48, std::chrono::milliseconds(20));
        if (got) held.insert(held.end(), got->begin(), got->end());
      } else if (!held.empty()) {
        pool->Free(held);
        held.clear();
      }
      if (budget.used() > budget.limit()) over = true;
    }
    pool->Free(held);
  };
  std::thread t1(churn, a.get(), 1), t2(churn, b.get(), 2);
  t1.join();
  t2.join();
  EXPECT_FALSE(over);
  a->Settle();
  b->Settle();
  EXPECT_EQ(budget.used(), (a->Stats().mapped_pages + b->Stats().mapped_pages) * kPage);
}

TEST(ElasticPoolTest, CompactionThroughTheBlockTableKeepsTheDataAndFreesPages) {
  auto pool = MakePool({.min_spare_pages = 0, .max_spare_pages = 0});
  {
    BlockTable table(pool.get());
    auto ids = table.Allocate(4 * kPerPage);  // four full pages
    ASSERT_TRUE(ids.has_value()) << ids.error().ToString();
    for (LogicalBlock id : *ids) Fill(table.Address(id), id);
    // Free every other block: four half-empty pages.
    std::vector<LogicalBlock> keep, drop;
    for (size_t i = 0; i < ids->size(); ++i) (i % 2 ? drop : keep).push_back((*ids)[i]);
    table.Free(drop);
    pool->Settle();
    EXPECT_EQ(pool->Stats().mapped_pages, 4u);
    auto moved = table.Compact();
    ASSERT_TRUE(moved.has_value()) << moved.error().ToString();
    EXPECT_GT(*moved, 0u);
    for (LogicalBlock id : keep) ASSERT_TRUE(Holds(table.Address(id), id)) << id;
    pool->Settle();
    ElasticPoolStats st = pool->Stats();
    EXPECT_EQ(st.mapped_pages, 2u) << st.used_blocks << " used " << st.free_mapped_blocks
                                   << " free " << st.maps << " maps " << st.unmaps << " unmaps";
    EXPECT_EQ(table.live(), keep.size());
  }
  EXPECT_EQ(pool->Stats().used_blocks, 0u);  // the table gave its blocks back
}

TEST(ElasticPoolTest, BadOptionsAreRefused) {
  auto backend = [] { return *NewHostPageBackend(); };
  EXPECT_FALSE(ElasticPool::Create(backend(), {.block_bytes = 3000}).has_value());
  EXPECT_FALSE(ElasticPool::Create(backend(), {.reserve_bytes = 4096}).has_value());
  EXPECT_FALSE(
      ElasticPool::Create(backend(), {.min_spare_pages = 3, .max_spare_pages = 1}).has_value());
  EXPECT_FALSE(NewHostPageBackend({.page_bytes = 1000}).has_value());
}

// The CUDA backend: runs where a GPU is present, skips cleanly elsewhere.
TEST(CudaPoolTest, MapsDevicePagesAndCopiesThroughThem) {
  if (!CudaAvailable()) {
    auto none = NewCudaPageBackend();
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error().code(), StatusCode::kUnavailable) << none.error().ToString();
    GTEST_SKIP() << "no GPU here: " << none.error().ToString();
  }
  auto backend = NewCudaPageBackend();
  ASSERT_TRUE(backend.has_value()) << backend.error().ToString();
  auto pool = ElasticPool::Create(
      std::move(*backend),
      {.reserve_bytes = 64 * kPage, .block_bytes = kBlock, .limit_bytes = 8 * kPage});
  ASSERT_TRUE(pool.has_value()) << pool.error().ToString();
  auto blocks = (*pool)->Allocate(3 * kPerPage);
  ASSERT_TRUE(blocks.has_value()) << blocks.error().ToString();
  std::vector<std::byte> in(kBlock), out(kBlock);
  for (size_t i = 0; i < 3; ++i) {
    Fill(in.data(), i);
    const BlockId b = (*blocks)[i * kPerPage];
    ASSERT_TRUE((*pool)->backend().Copy((*pool)->Address(b), in.data(), kBlock).ok());
    ASSERT_TRUE((*pool)->backend().Copy(out.data(), (*pool)->Address(b), kBlock).ok());
    EXPECT_TRUE(Holds(out.data(), i));
  }
  (*pool)->Free(*blocks);
  (*pool)->Settle();
  EXPECT_GT((*pool)->Stats().maps, 0u);
}

}  // namespace
}  // namespace objectcache
