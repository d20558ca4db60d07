#include "server/memory_budget.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace objectcache::server {
namespace {

TEST(MemoryBudgetTest, LeasesGrowWithinTheLimitAndReturnTheirBytes) {
  MemoryBudget budget(100);
  {
    MemoryBudget::Lease a = budget.NewLease();
    ASSERT_TRUE(a.GrowTo(60));
    MemoryBudget::Lease b = budget.NewLease();
    EXPECT_FALSE(b.GrowTo(41));
    EXPECT_EQ(b.bytes(), 0u);
    ASSERT_TRUE(b.GrowTo(40));
    EXPECT_EQ(budget.used(), 100u);
    EXPECT_TRUE(a.GrowTo(10));  // never shrinks below what it holds
    EXPECT_EQ(a.bytes(), 60u);
    MemoryBudget::Lease moved = std::move(a);
    EXPECT_EQ(budget.used(), 100u);
  }
  EXPECT_EQ(budget.used(), 0u);
}

TEST(MemoryBudgetTest, ALeaseShrinksToWhatItStillHolds) {
  MemoryBudget budget(100);
  MemoryBudget::Lease a = budget.NewLease();
  ASSERT_TRUE(a.GrowTo(80));
  a.ShrinkTo(30);
  EXPECT_EQ(a.bytes(), 30u);
  EXPECT_EQ(budget.used(), 30u);
  a.ShrinkTo(50);  // never grows
  EXPECT_EQ(a.bytes(), 30u);
  MemoryBudget::Lease b = budget.NewLease();
  EXPECT_TRUE(b.GrowTo(70));
  a.ShrinkTo(0);
  EXPECT_EQ(budget.used(), 70u);
}

TEST(MemoryBudgetTest, ALeaseSplitsIntoLeasesOfItsOwnBytes) {
  MemoryBudget budget(100);
  MemoryBudget::Lease whole = budget.NewLease();
  ASSERT_TRUE(whole.GrowTo(90));
  {
    MemoryBudget::Lease part = whole.Split(40);
    EXPECT_EQ(part.bytes(), 40u);
    EXPECT_EQ(whole.bytes(), 50u);
    MemoryBudget::Lease rest = whole.Split(1000);  // no more than it holds
    EXPECT_EQ(rest.bytes(), 50u);
    EXPECT_EQ(whole.bytes(), 0u);
    EXPECT_EQ(budget.used(), 90u);
  }
  EXPECT_EQ(budget.used(), 0u);
}

TEST(MemoryBudgetTest, HugeRequestsNeverWrap) {
  MemoryBudget budget(100);
  MemoryBudget::Lease a = budget.NewLease();
  ASSERT_TRUE(a.GrowTo(50));
  MemoryBudget::Lease b = budget.NewLease();
  EXPECT_FALSE(b.GrowTo(std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(b.GrowTo(std::numeric_limits<uint64_t>::max() - 20));
  EXPECT_EQ(budget.used(), 50u);
}

}  // namespace
}  // namespace objectcache::server
