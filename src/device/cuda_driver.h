// The CUDA driver, opened at run time: libcuda.so.1 through dlopen, its entry points through
// cuGetProcAddress (or by their exported names where the driver predates it). The same binary
// runs with or without a GPU: where there is no driver every call answers Unavailable.
#pragma once

#include <string>

#include "device/cuda_api.h"
#include "objectcache/status.h"

namespace objectcache::cuda {

// The driver's entry points after cuInit; Unavailable, saying why, when the library is missing,
// lacks an entry point or cuInit fails. Loaded once (later calls return the same answer).
Result<const DriverApi*> Driver();

// OK for CUDA_SUCCESS; otherwise the error, named with `what` and the driver's message
// (ResourceExhausted for out of memory, Internal for the rest).
Status Check(CUresult r, const char* what);

// Makes device `ordinal`'s primary context current on the calling thread (Unavailable when no
// such device).
Status MakeCurrent(int ordinal);

// The device's name ("NVIDIA H200"); empty when it cannot be read.
std::string DeviceName(int ordinal);

// cuMemHostRegister / cuMemHostUnregister on device 0's context: page-locks host memory.
Status RegisterHostMemory(void* p, size_t bytes);
Status UnregisterHostMemory(void* p);

}  // namespace objectcache::cuda
