#include "server/window_buffers.h"

#include <gtest/gtest.h>

namespace objectcache::server {
namespace {

TEST(WindowBuffersTest, AGivenBufferIsTakenAgainWithItsPages) {
  MemoryBudget budget(64 << 20);
  WindowBuffers buffers(&budget, 8 << 20);
  PageBuffer a = buffers.Take(1 << 20);
  ASSERT_EQ(a.size(), 1u << 20);
  a.bytes()[0] = std::byte{9};  // written: resident from now on
  std::byte* const at = a.data();
  buffers.Give(std::move(a));
  EXPECT_EQ(buffers.kept_bytes(), 1u << 20);
  PageBuffer b = buffers.Take((1 << 20) - 4096);  // smaller, within twice: cut down to it
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(b.size(), (1u << 20) - 4096);
  EXPECT_EQ(b.bytes()[0], std::byte{9});
  EXPECT_EQ(buffers.kept_bytes(), 0u);
}

TEST(WindowBuffersTest, OnlyBuffersAtMostTwiceTheSizeAreTaken) {
  MemoryBudget budget(64 << 20);
  WindowBuffers buffers(&budget, 8 << 20);
  buffers.Give(PageBuffer(4 << 20));
  PageBuffer small = buffers.Take(1 << 20);  // 4 MiB is more than twice: a new one
  EXPECT_EQ(small.size(), 1u << 20);
  EXPECT_EQ(buffers.kept_bytes(), 4u << 20);
  PageBuffer large = buffers.Take(5 << 20);  // larger than any kept
  EXPECT_EQ(large.size(), 5u << 20);
  EXPECT_EQ(buffers.kept_bytes(), 4u << 20);
}

TEST(WindowBuffersTest, AnAllocatedBufferIsTakenOnlyAtItsOwnSize) {
  MemoryBudget budget(64 << 20);
  WindowBuffers buffers(&budget, 8 << 20);
  PageBuffer a(64 << 10);  // below kMappedBufferBytes: allocated, cannot be cut down
  ASSERT_FALSE(a.mapped());
  std::byte* const at = a.data();
  buffers.Give(std::move(a));
  EXPECT_NE(buffers.Take(48 << 10).data(), at);
  EXPECT_EQ(buffers.Take(64 << 10).data(), at);
}

TEST(WindowBuffersTest, KeepsAtMostItsBoundDroppingTheOldest) {
  MemoryBudget budget(64 << 20);
  WindowBuffers buffers(&budget, 3 << 20);
  buffers.Give(PageBuffer(1 << 20));
  PageBuffer second(1 << 20);
  std::byte* const second_at = second.data();
  buffers.Give(std::move(second));
  buffers.Give(PageBuffer(2 << 20));  // 4 MiB in all: the oldest goes
  EXPECT_EQ(buffers.kept_bytes(), 3u << 20);
  EXPECT_EQ(buffers.Take(1 << 20).data(), second_at);
  buffers.Give(PageBuffer(4 << 20));  // over the bound by itself: not kept
  EXPECT_EQ(buffers.kept_bytes(), 2u << 20);
  buffers.Give(PageBuffer());  // nothing to keep
  EXPECT_EQ(buffers.kept_bytes(), 2u << 20);
}

TEST(WindowBuffersTest, KeptBuffersCountAgainstTheBudget) {
  MemoryBudget budget(5 << 20);
  WindowBuffers buffers(&budget, 8 << 20);
  buffers.Give(PageBuffer(2 << 20));
  EXPECT_EQ(budget.used(), 2u << 20);
  MemoryBudget::Lease request = budget.NewLease();
  ASSERT_TRUE(request.GrowTo(2 << 20));
  buffers.Give(PageBuffer(2 << 20));  // 6 MiB would pass the budget: not kept
  EXPECT_EQ(buffers.kept_bytes(), 2u << 20);
  EXPECT_EQ(budget.used(), 4u << 20);
  PageBuffer taken = buffers.Take(2 << 20);  // a response's lease holds it now
  EXPECT_EQ(budget.used(), 2u << 20);
  buffers.Give(std::move(taken));
  EXPECT_EQ(budget.used(), 4u << 20);
  // A request the budget refuses has the kept buffers dropped, and then fits.
  EXPECT_FALSE(request.GrowTo(5 << 20));
  EXPECT_TRUE(buffers.DropAll());
  EXPECT_EQ(buffers.kept_bytes(), 0u);
  EXPECT_EQ(budget.used(), 2u << 20);
  EXPECT_TRUE(request.GrowTo(5 << 20));
  EXPECT_FALSE(buffers.DropAll());
}

TEST(WindowBuffersTest, GivesItsBytesBackWhenDestroyed) {
  MemoryBudget budget(8 << 20);
  {
    WindowBuffers buffers(&budget, 8 << 20);
    buffers.Give(PageBuffer(3 << 20));
    EXPECT_EQ(budget.used(), 3u << 20);
  }
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace objectcache::server
