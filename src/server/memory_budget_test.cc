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
