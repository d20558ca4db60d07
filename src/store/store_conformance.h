// The store conformance suite: the behaviour every Store backend must have.
//
// A backend's test instantiates it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Local, StoreConformanceTest,
//       ::testing::Values(StoreFactory{"local", [](const std::string& dir) {
//         return OpenLocalStore({.root = dir}); }}));
//
// The factory gets a fresh scratch directory per test (backends that need no directory ignore
// it) and may be called again with the same directory after the first store is destroyed: a
// persistent backend must then show the same objects.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "objectcache/store.h"
#include "store/scratch_dir.h"

namespace objectcache {

struct StoreFactory {
  std::string name;
  std::function<Result<std::unique_ptr<Store>>(const std::string& scratch_dir)> open;
};

inline std::string PrintToString(const StoreFactory& f) { return f.name; }

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Destroys the store and opens it again on the same scratch directory.
  void Reopen();

  std::string dir_;
  std::unique_ptr<Store> store_;
};

}  // namespace objectcache
