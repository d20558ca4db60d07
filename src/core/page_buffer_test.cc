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
  // Allocated and mapped blocks alike, the mapped one ending exactly on its last page.
  for (size_t bytes : {size_t{100000}, kMappedBufferBytes - 16, size_t{5} << 20}) {
    PageBuffer b(bytes, 16);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kPageBytes, 16u);
    ASSERT_EQ(b.bytes().size(), bytes);
    EXPECT_EQ(b.bytes().front(), std::byte{0});
    EXPECT_EQ(b.bytes().back(), std::byte{0});
    b.bytes().back() = std::byte{7};  // all of it is writable
  }
}

TEST(PageBufferTest, PagesOnFirstWriteAreZeroedWhenWritten) {
  PageBuffer b(kMappedBufferBytes * 4, 0, PageBuffer::Pages::kOnFirstWrite);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kPageBytes, 0u);
  b.bytes()[kPageBytes * 5] = std::byte{3};
  for (size_t i = 0; i < b.size(); i += 1024) {
    ASSERT_EQ(b.bytes()[i], i == kPageBytes * 5 ? std::byte{3} : std::byte{0}) << i;
  }
  EXPECT_EQ(b.bytes().back(), std::byte{0});
}

TEST(PageBufferTest, AReplacedBufferGivesItsBlockBack) {
  // Under ASan (scripts/sanitize) a block freed the wrong way, or twice, is an error.
  PageBuffer mapped(kMappedBufferBytes), allocated(4096);
  mapped.bytes()[0] = std::byte{1};
  mapped = std::move(allocated);
  EXPECT_EQ(mapped.size(), 4096u);
  mapped = PageBuffer(kMappedBufferBytes * 2);
  EXPECT_EQ(mapped.bytes()[kMappedBufferBytes], std::byte{0});
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
