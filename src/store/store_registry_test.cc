#include "objectcache/store_registry.h"

#include <gtest/gtest.h>

#include "store/store_conformance.h"

namespace objectcache {
namespace {

TEST(StoreRegistryTest, OpensEachScheme) {
  std::string dir = MakeScratchDir();
  {
    auto mem = OpenStore("mem://");
    ASSERT_TRUE(mem.has_value());
    EXPECT_EQ((*mem)->Uri(), "mem://");
    auto file = OpenStore("file://" + dir + "?capacity=1MiB&durable=true");
    ASSERT_TRUE(file.has_value()) << file.error().ToString();
    EXPECT_EQ((*file)->Capabilities().capacity_bytes, 1u << 20);
    EXPECT_TRUE((*file)->Capabilities().persistent);
  }
  {
    auto bare = OpenStore(dir);  // a bare path is a local store
    ASSERT_TRUE(bare.has_value()) << bare.error().ToString();
  }
  RemoveTree(dir);
}

TEST(StoreRegistryTest, BadUrisAreInvalidArgument) {
  for (const char* uri :
       {"", "ftp://x", "file://", "file:///tmp/x?capacity=lots", "file:///tmp/x?colour=blue",
        "file:///tmp/x?durable=maybe", "file:///tmp/x?capacity"}) {
    auto s = OpenStore(uri);
    ASSERT_FALSE(s.has_value()) << uri;
    EXPECT_EQ(s.error().code(), StatusCode::kInvalidArgument) << uri;
  }
}

TEST(StoreRegistryTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("10"), 10u);
  EXPECT_EQ(*ParseByteSize("10GiB"), 10ull << 30);
  EXPECT_EQ(*ParseByteSize("3M"), 3000000u);
  EXPECT_EQ(ParseByteSize("1.5G").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseByteSize("99999999999TiB").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseByteSize("-1").error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace objectcache
