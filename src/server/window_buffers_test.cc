#include "server/window_buffers.h"

#include <gtest/gtest.h>

namespace objectcache::server {
namespace {

TEST(WindowBuffersTest, AGivenBufferIsTakenAgainWithItsPages) {
  WindowBuffers buffers(8 << 20);
  PageBuffer a = buffers.Take(1 << 20);
  ASSERT_GE(a.size(), 1u << 20);
  a.bytes()[0] = std::byte{9};  // written: resident from now on
  std::byte* const at = a.data();
  buffers.Give(std::move(a));
  EXPECT_EQ(buffers.kept_bytes(), 1u << 20);
  PageBuffer b = buffers.Take((1 << 20) - 4096);  // smaller, within twice
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(buffers.kept_bytes(), 0u);
}

TEST(WindowBuffersTest, OnlyBuffersAtMostTwiceTheSizeAreTaken) {
  WindowBuffers buffers(8 << 20);
  buffers.Give(PageBuffer(4 << 20));
  PageBuffer small = buffers.Take(1 << 20);  // 4 MiB is more than twice: a new one
  EXPECT_EQ(small.size(), 1u << 20);
  EXPECT_EQ(buffers.kept_bytes(), 4u << 20);
  PageBuffer large = buffers.Take(5 << 20);  // larger than any kept
  EXPECT_EQ(large.size(), 5u << 20);
  EXPECT_EQ(buffers.kept_bytes(), 4u << 20);
}

TEST(WindowBuffersTest, KeepsAtMostItsBoundDroppingTheOldest) {
  WindowBuffers buffers(3 << 20);
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

}  // namespace
}  // namespace objectcache::server
