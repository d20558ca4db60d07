// The CUDA driver API calls the pools need, behind a small seam so that the rest of src/mem
// builds and runs without CUDA. Built from cuda_driver.cc (the real calls, linked against
// libcuda; the toolkit's stub library when there is no GPU) when CMake finds the CUDA toolkit,
// else from cuda_driver_none.cc (every call answers Unimplemented).
#pragma once

#include <cstddef>
#include <cstdint>

#include "objectcache/status.h"

namespace objectcache::cuda {

// Whether this build has the CUDA code at all.
bool Built();
// cuInit and a context on `device`: Unavailable when the driver or the GPU is missing.
Status Init(int device);
// cuMemHostRegister / cuMemHostUnregister: page-locks host memory for fast DMA.
Status RegisterHostMemory(void* p, size_t bytes);
Status UnregisterHostMemory(void* p);

}  // namespace objectcache::cuda
