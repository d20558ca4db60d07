#include "store/memory/memory_store.h"

#include "store/store_conformance.h"

namespace objectcache {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, StoreConformanceTest,
                         ::testing::Values(StoreFactory{
                             "memory",
                             [](const std::string&) -> Result<std::unique_ptr<Store>> {
                               return NewMemoryStore();
                             }}),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace objectcache
