// The part of the CUDA driver API ObjectCache uses, declared here so that every build compiles
// the CUDA code without a CUDA toolkit (Debian 12 ships none). Types, constants and function
// types follow the driver's stable C ABI (cuda.h of CUDA 12 and 13); the functions themselves
// are looked up at run time in libcuda.so.1 (cuda_driver.cc), so a machine without a driver
// answers Unavailable and nothing else changes.
//
// Declared in a namespace of their own: a file that also includes the toolkit's cuda.h sees no
// clash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace objectcache::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;

inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;
inline constexpr int CU_GET_PROC_ADDRESS_DEFAULT = 0;

// Virtual memory management (the elastic pool's CUDA backend).
enum CUmemAllocationType { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum CUmemAllocationHandleType { CU_MEM_HANDLE_TYPE_NONE = 0x0 };
enum CUmemLocationType { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
enum CUmemAccess_flags { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
enum CUmemAllocationGranularity_flags { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0 };

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};

struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

// The entry points, by the name cuGetProcAddress knows them, with the version of their
// signature this file declares (the exported symbol when cuGetProcAddress is missing).
// X(name, exported symbol, return and parameters)
#define OC_CUDA_ENTRY_POINTS(X)                                                                \
  X(cuInit, "cuInit", CUresult(unsigned))                                                      \
  X(cuDriverGetVersion, "cuDriverGetVersion", CUresult(int*))                                  \
  X(cuGetErrorString, "cuGetErrorString", CUresult(CUresult, const char**))                    \
  X(cuDeviceGet, "cuDeviceGet", CUresult(CUdevice*, int))                                      \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult(int*))                                      \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult(char*, int, CUdevice))                        \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult(CUcontext*, CUdevice))      \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult(CUcontext))                                   \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult(CUdeviceptr*, size_t))                               \
  X(cuMemFree, "cuMemFree_v2", CUresult(CUdeviceptr))                                          \
  X(cuMemHostAlloc, "cuMemHostAlloc", CUresult(void**, size_t, unsigned))                      \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult(void*))                                           \
  X(cuMemHostRegister, "cuMemHostRegister_v2", CUresult(void*, size_t, unsigned))              \
  X(cuMemHostUnregister, "cuMemHostUnregister", CUresult(void*))                               \
  X(cuMemcpy, "cuMemcpy", CUresult(CUdeviceptr, CUdeviceptr, size_t))                          \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult(CUdeviceptr, const void*, size_t))               \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                                 \
    CUresult(CUdeviceptr, const void*, size_t, CUstream))                                      \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult(void*, CUdeviceptr, size_t, CUstream)) \
  X(cuStreamCreate, "cuStreamCreate", CUresult(CUstream*, unsigned))                           \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult(CUstream))                                 \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult(CUstream))                            \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult(CUstream, CUevent, unsigned))             \
  X(cuEventCreate, "cuEventCreate", CUresult(CUevent*, unsigned))                              \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult(CUevent))                                    \
  X(cuEventRecord, "cuEventRecord", CUresult(CUevent, CUstream))                               \
  X(cuEventQuery, "cuEventQuery", CUresult(CUevent))                                           \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult(CUevent))                               \
  X(cuModuleLoadData, "cuModuleLoadData", CUresult(CUmodule*, const void*))                    \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult(CUfunction*, CUmodule, const char*))  \
  X(cuLaunchKernel, "cuLaunchKernel",                                                          \
    CUresult(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
             CUstream, void**, void**))                                                        \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",                            \
    CUresult(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags))           \
  X(cuMemAddressReserve, "cuMemAddressReserve",                                                \
    CUresult(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long))                   \
  X(cuMemAddressFree, "cuMemAddressFree", CUresult(CUdeviceptr, size_t))                       \
  X(cuMemCreate, "cuMemCreate",                                                                \
    CUresult(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,                \
             unsigned long long))                                                              \
  X(cuMemRelease, "cuMemRelease", CUresult(CUmemGenericAllocationHandle))                      \
  X(cuMemMap, "cuMemMap",                                                                      \
    CUresult(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))   \
  X(cuMemUnmap, "cuMemUnmap", CUresult(CUdeviceptr, size_t))                                   \
  X(cuMemSetAccess, "cuMemSetAccess", CUresult(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t))

// The driver's functions, once resolved.
struct DriverApi {
#define OC_CUDA_MEMBER(name, symbol, type) std::add_pointer_t<type> name = nullptr;
  OC_CUDA_ENTRY_POINTS(OC_CUDA_MEMBER)
#undef OC_CUDA_MEMBER
};

// The signature version of the entry points above, as cuGetProcAddress takes it.
inline constexpr int kCudaApiVersion = 12000;

}  // namespace objectcache::cuda
