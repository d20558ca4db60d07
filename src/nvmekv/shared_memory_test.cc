// The shared segment seen through two mappings, as a host in the controller's own process sees
// it: bytes written through one appear through the other, and a word stored through one orders
// the data before it for a thread that loads the word through the other.
#include "nvmekv/shared_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "nvmekv/kv_conformance.h"

namespace objectcache::nvmekv {
namespace {

// A segment as the controller creates it, and a second mapping of it as a host opens it.
class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = SharedMemory::Create(UniqueShmName(), kPageBytes, kPageBytes, false);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    controller_.emplace(std::move(*created));
    auto opened = SharedMemory::Open(controller_->name());
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    host_.emplace(std::move(*opened));
  }

  std::optional<SharedMemory> controller_, host_;
};

TEST_F(SharedMemoryTest, TwoMappingsShowTheSameBytes) {
  ASSERT_NE(controller_->base(), host_->base());
  std::memcpy(controller_->data_region().data(), "kv", 2);
  EXPECT_EQ(std::memcmp(host_->data_region().data(), "kv", 2), 0);
  controller_->Register32(reg::kCc).store(7);
  EXPECT_EQ(host_->Register32(reg::kCc).load(), 7u);
}

// The data region is written and the doorbell stored through the controller's mapping; another
// thread waits for the doorbell through the host's mapping and then reads the data. Under
// ThreadSanitizer this fails as a data race unless the word names the ordering (SharedWord): TSan
// matches a release and an acquire only at one virtual address.
TEST_F(SharedMemoryTest, AWordOrdersTheDataBeforeItAcrossMappings) {
  const size_t doorbell = SqTailDoorbell(1, kDoorbellStride);
  std::byte* data = controller_->data_region().data();
  std::byte seen{};
  std::thread reader([&] {
    while (host_->Register32(doorbell).load(std::memory_order_acquire) == 0) {
      std::this_thread::yield();
    }
    seen = data[100];
  });
  data[100] = std::byte{0x5A};
  controller_->Register32(doorbell).store(1, std::memory_order_release);
  reader.join();
  EXPECT_EQ(seen, std::byte{0x5A});
}

}  // namespace
}  // namespace objectcache::nvmekv
