// The shared segment seen through two mappings, as a host in the controller's own process sees
// it: bytes written through one appear through the other, and a word stored through one orders
// the data before it for a thread that loads the word through the other.
#include "nvmekv/shared_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "nvmekv/kv_conformance.h"

namespace objectcache::nvmekv {
namespace {

TEST(SharedMemoryTest, TwoMappingsShowTheSameBytes) {
  auto created = SharedMemory::Create(UniqueShmName(), kPageBytes, kPageBytes, false);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto opened = SharedMemory::Open(created->name());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_NE(created->base(), opened->base());
  std::memcpy(created->data_region().data(), "kv", 2);
  EXPECT_EQ(std::memcmp(opened->data_region().data(), "kv", 2), 0);
  created->Register32(reg::kCc).store(7);
  EXPECT_EQ(opened->Register32(reg::kCc).load(), 7u);
}

// The data region is written and the doorbell stored through the controller's mapping; another
// thread waits for the doorbell through the host's mapping and then reads the data. Under
// ThreadSanitizer this fails as a data race unless the word names the ordering (SharedWord): TSan
// matches a release and an acquire only at one virtual address.
TEST(SharedMemoryTest, AWordOrdersTheDataBeforeItAcrossMappings) {
  auto controller = SharedMemory::Create(UniqueShmName(), kPageBytes, kPageBytes, false);
  ASSERT_TRUE(controller.ok()) << controller.status().ToString();
  auto host = SharedMemory::Open(controller->name());
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  const size_t doorbell = SqTailDoorbell(1, kDoorbellStride);
  std::byte* data = controller->data_region().data();
  std::byte seen{};
  std::thread reader([&] {
    while (host->Register32(doorbell).load(std::memory_order_acquire) == 0) {
      std::this_thread::yield();
    }
    seen = data[100];
  });
  data[100] = std::byte{0x5A};
  controller->Register32(doorbell).store(1, std::memory_order_release);
  reader.join();
  EXPECT_EQ(seen, std::byte{0x5A});
}

}  // namespace
}  // namespace objectcache::nvmekv
