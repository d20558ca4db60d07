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

TEST(StoreRegistryTest, RefusesWhatAUriCannotMean) {
  const std::pair<const char*, const char*> bad[] = {
      // mem:// has no options: a memory store cannot evict, so capacity= would be ignored.
      {"mem://?capacity=1GiB", "mem:// takes no path or options"},
      {"mem://x", "mem:// takes no path or options"},
      // The same option twice would leave one of them unread.
      {"file:///tmp/x?capacity=1GiB&capacity=5GiB", "option 'capacity' is given twice"},
      {"file:///tmp/x?durable=true&open_files=9&durable=false", "option 'durable' is given twice"},
      {"rados://pool?conf=/c&capacity=1G&capacity=2G", "option 'capacity' is given twice"},
      // A capacity of 0 holds nothing.
      {"file:///tmp/x?capacity=0", "capacity of 0 holds nothing"},
      {"rados://pool?conf=/c&capacity=0KiB", "capacity of 0 holds nothing"},
  };
  for (const auto& [uri, why] : bad) {
    auto s = OpenStore(uri);
    ASSERT_FALSE(s.has_value()) << uri;
    EXPECT_EQ(s.error().code(), StatusCode::kInvalidArgument) << uri;
    EXPECT_NE(s.error().message().find(why), std::string::npos) << s.error().message();
  }
  EXPECT_EQ(*ParseStoreCapacity("1"), 1u);
  EXPECT_EQ(*ParseStoreCapacity("16TiB"), 16ull << 40);
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
