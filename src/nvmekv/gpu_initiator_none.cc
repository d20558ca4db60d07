// Builds without the CUDA compiler: no GPU initiator.
#include "nvmekv/gpu_initiator.h"

namespace objectcache::nvmekv {

Result<std::unique_ptr<GpuInitiator>> GpuInitiator::Create(Host&, QueuePair&) {
  return UnavailableError("this build has no CUDA support (no CUDA compiler was found)");
}

}  // namespace objectcache::nvmekv
