#include "core/page_buffer.h"

#include <cstdint>
#include <utility>

#include <gtest/gtest.h>

namespace objectcache {
namespace {

TEST(PageBufferTest, StartsOnAPageBoundaryZeroed) {
  for (size_t bytes : {size_t{1}, size_t{4095}, size_t{4096}, size_t{3} << 20}) {
    PageBuffer b(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kPageBytes, 0u) << bytes;
    ASSERT_EQ(b.size(), bytes);
    for (std::byte x : b.bytes()) ASSERT_EQ(x, std::byte{0});
  }
}

TEST(PageBufferTest, StartsTheOffsetPastAPageBoundary) {
  PageBuffer b(100000, 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kPageBytes, 16u);
  EXPECT_EQ(b.bytes().size(), 100000u);
  b.bytes().back() = std::byte{7};  // all of it is writable
}

TEST(PageBufferTest, MovesItsBlock) {
  PageBuffer a(8192);
  std::byte* p = a.data();
  PageBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 8192u);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  PageBuffer empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.bytes().empty());
}

}  // namespace
}  // namespace objectcache
