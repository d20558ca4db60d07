// The GPU initiator against the controller: values stored from the host are retrieved by GPU
// threads that write their own submission entries and poll their completions on the GPU. Runs
// wherever a CUDA device is present; skips elsewhere (and in builds without CUDA).
#include "nvmekv/gpu_initiator.h"

#include <gtest/gtest.h>

#include <cstring>

#include "nvmekv/kv_conformance.h"
#include "objectcache/store_registry.h"

namespace objectcache::nvmekv {
namespace {

// The conformance suite is linked in for its helpers; its instances live in nvmekv_test.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NvmeKvConformanceTest);

TEST(NvmeKvGpuInitiatorTest, GpuThreadsRetrieveAndExist) {
  auto store = OpenStore("mem://");
  ASSERT_TRUE(store.ok());
  auto d = StartTestDevice(store->get(), {.data_bytes = 64 << 20, .max_value_bytes = 1 << 20},
                           {.io_queues = 2, .queue_entries = 256});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  Host& host = *d->host;
  auto gpu = GpuInitiator::Create(host, host.io_queue(1));
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().ToString();
  std::cout << "GPU: " << (*gpu)->device_name() << std::endl;

  // 200 values stored from the host, of several sizes.
  constexpr int kValues = 200;
  std::vector<std::string> values;
  std::vector<Key> keys;
  {
    auto buf = host.Allocate(1 << 16);
    ASSERT_TRUE(buf.ok());
    for (int i = 0; i < kValues; ++i) {
      keys.push_back(TestKey("gpu-" + std::to_string(i)));
      values.push_back(TestValue(1000 + 300 * static_cast<size_t>(i), static_cast<uint32_t>(i)));
      std::memcpy(buf->bytes().data(), values.back().data(), values.back().size());
      ASSERT_TRUE(
          KvStore(host.io_queue(0), keys.back(), *buf, static_cast<uint32_t>(values.back().size()))
              .ok());
    }
  }
  // Several rounds, so the GPU's queue wraps and its phase flips.
  for (int round = 0; round < 4; ++round) {
    std::vector<DataBuffer> dest;
    std::vector<SubmissionEntry> entries;
    for (int i = 0; i < kValues; ++i) {
      auto b = host.Allocate(values[static_cast<size_t>(i)].size());
      ASSERT_TRUE(b.ok());
      std::memset(b->bytes().data(), 0, b->bytes().size());
      entries.push_back(RetrieveCommand(keys[static_cast<size_t>(i)], b->offset(),
                                        static_cast<uint32_t>(b->bytes().size())));
      dest.push_back(std::move(*b));
    }
    std::vector<CompletionEntry> out(entries.size());
    Status s = (*gpu)->RunBatch(entries, out, std::chrono::milliseconds(5000));
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < kValues; ++i) {
      const CompletionEntry& c = out[static_cast<size_t>(i)];
      ASSERT_TRUE(c.status().ok()) << DescribeStatus(c.status());
      EXPECT_EQ(c.command_id(), i);
      EXPECT_EQ(c.dw[0], values[static_cast<size_t>(i)].size());
      ASSERT_EQ(
          std::memcmp(dest[static_cast<size_t>(i)].bytes().data(),
                      values[static_cast<size_t>(i)].data(), values[static_cast<size_t>(i)].size()),
          0)
          << "value " << i << " of round " << round;
    }
    // Exist from the GPU: present and absent keys.
    std::vector<SubmissionEntry> exist = {ExistCommand(keys[0]), ExistCommand(TestKey("absent"))};
    std::vector<CompletionEntry> exist_out(2);
    ASSERT_TRUE((*gpu)->RunBatch(exist, exist_out, std::chrono::milliseconds(5000)).ok());
    EXPECT_TRUE(exist_out[0].status().ok());
    EXPECT_TRUE(IsKeyValueStatus(exist_out[1].status(), sc::kKeyDoesNotExist));
  }
  gpu->reset();
  d->Stop();
}

}  // namespace
}  // namespace objectcache::nvmekv
