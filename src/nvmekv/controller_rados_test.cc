// The NVMe-KV conformance suite over RADOS (the ceph fixture's cluster), each test in a RADOS
// namespace of its own.
#include <cstdlib>

#include "nvmekv/kv_conformance.h"
#include "objectcache/store_registry.h"

namespace objectcache::nvmekv {
namespace {

Result<std::unique_ptr<Store>> OpenRadosForTest(const std::string& scratch_dir) {
  const char* dir = std::getenv("OBJECTCACHE_TEST_CEPH");
  if (dir == nullptr) {
    return FailedPreconditionError("OBJECTCACHE_TEST_CEPH is not set: run this test under ctest");
  }
  std::string ns = "nvmekv" + scratch_dir;
  for (char& c : ns) {
    if (c == '/') c = '_';
  }
  return OpenStore("rados://objectcache?conf=" + std::string(dir) + "/ceph.conf&namespace=" + ns);
}

INSTANTIATE_TEST_SUITE_P(Rados, NvmeKvConformanceTest,
                         ::testing::Values(StoreFactory{"rados", OpenRadosForTest}),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace objectcache::nvmekv
