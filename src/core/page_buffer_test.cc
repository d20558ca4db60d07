#include "core/page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

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

// Whether every page of [p, p + bytes) is mapped: mincore fails with ENOMEM on an unmapped one.
bool AllMapped(const std::byte* p, size_t bytes) {
  std::vector<unsigned char> resident((bytes + kPageBytes - 1) / kPageBytes);
  return ::mincore(const_cast<std::byte*>(p), bytes, resident.data()) == 0;
}

TEST(PageBufferTest, AMappedBufferIsCutDownToItsFirstBytes) {
  PageBuffer b(1 << 20, 0, PageBuffer::Pages::kOnFirstWrite);
  ASSERT_TRUE(b.mapped());
  std::byte* const at = b.data();
  b.bytes()[0] = std::byte{7};
  b.bytes()[(1 << 20) - 1] = std::byte{8};
  const size_t kept = (300 << 10) + 5;  // not a whole number of pages
  ASSERT_TRUE(b.ShrinkTo(kept));
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(b.size(), kept);
  EXPECT_EQ(b.bytes()[0], std::byte{7});
  const size_t kept_pages = (kept + kPageBytes - 1) / kPageBytes * kPageBytes;
  EXPECT_TRUE(AllMapped(at, kept_pages));
  EXPECT_FALSE(AllMapped(at + kept_pages, (1 << 20) - kept_pages));
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_FALSE(b.ShrinkTo(kept + 1));  // never grows
  EXPECT_EQ(b.size(), kept);
  ASSERT_TRUE(b.ShrinkTo(0));  // one page stays mapped, and is unmapped with the buffer
  EXPECT_EQ(b.size(), 0u);
  EXPECT_TRUE(AllMapped(at, kPageBytes));
  EXPECT_FALSE(AllMapped(at + kPageBytes, kPageBytes));
}

TEST(PageBufferTest, AnAllocatedBufferIsNotCutDown) {
  PageBuffer b(8192);
  EXPECT_FALSE(b.mapped());
  EXPECT_FALSE(b.ShrinkTo(4096));
  EXPECT_EQ(b.size(), 8192u);
}

}  // namespace
}  // namespace objectcache
