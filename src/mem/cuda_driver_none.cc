// Builds without the CUDA toolkit: no CUDA backend, and host pages are never registered.
#include "mem/cuda_driver.h"
#include "objectcache/kv_pool.h"

namespace objectcache {
namespace cuda {

bool Built() { return false; }
Status Init(int) { return UnimplementedError("built without the CUDA toolkit"); }
Status RegisterHostMemory(void*, size_t) { return Init(0); }
Status UnregisterHostMemory(void*) { return Init(0); }

}  // namespace cuda

bool CudaAvailable() { return false; }

Result<std::unique_ptr<PageBackend>> NewCudaPageBackend(int, uint64_t) { return cuda::Init(0); }

}  // namespace objectcache
