// The NVMe-KV conformance suite: the same commands give the same results over every store.
// A test instantiates it with store factories (store/store_conformance.h):
//
//   INSTANTIATE_TEST_SUITE_P(Mem, NvmeKvConformanceTest,
//       ::testing::Values(StoreFactory{"mem", [](const std::string&) { return OpenStore("mem://");
//       }}));
//
// Also the helpers the controller's tests share: a controller and an attached host over a store,
// on a shared-memory name of their own.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "nvmekv/controller.h"
#include "nvmekv/host.h"
#include "store/store_conformance.h"

namespace objectcache::nvmekv {

// A shared-memory name no other test process uses.
std::string UniqueShmName();
Key TestKey(std::string_view text);
// `n` bytes, different for every (seed, n).
std::string TestValue(size_t n, uint32_t seed);

struct TestDevice {
  std::unique_ptr<Controller> controller;
  std::unique_ptr<Host> host;  // destroyed first (members go in reverse order)
  // Detaches the host, then stops the controller.
  void Stop() {
    host.reset();
    controller.reset();
  }
};

// Starts a controller over `store` (options.shm_name is replaced by a unique one) and attaches
// a host with `host_options` (its shm_name is set to the controller's).
Result<TestDevice> StartTestDevice(Store* store, ControllerOptions options,
                                   HostOptions host_options = {});

class NvmeKvConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::string dir_;
  std::unique_ptr<Store> store_;
  TestDevice device_;
};

}  // namespace objectcache::nvmekv
