// The copy kernel of the CUDA device's Scatter and Gather (cuda_device.cc). Not compiled by the
// build: copy_kernel.ptx is its PTX, kept in the repository and compiled by the driver at run
// time, so no build needs nvcc. After a change, regenerate it with
//   scripts/gen-copy-kernel-ptx
// Segment i copies segments[i].bytes from src + segments[i].src to dst + segments[i].dst (the
// gather the other way); one thread block a segment at a time, 16 bytes a thread where both ends
// and the length allow.
struct Segment {
  unsigned long long src, dst, bytes;
};

__device__ void CopySegments(const unsigned char* src, unsigned char* dst, const Segment* segments,
                             unsigned long long count, bool reverse) {
  for (unsigned long long i = blockIdx.x; i < count; i += gridDim.x) {
    const Segment s = segments[i];
    const unsigned char* from = src + (reverse ? s.dst : s.src);
    unsigned char* to = dst + (reverse ? s.src : s.dst);
    const unsigned long long aligned = reinterpret_cast<unsigned long long>(from) |
                                       reinterpret_cast<unsigned long long>(to) | s.bytes;
    if ((aligned & 15) == 0) {
      const uint4* f = reinterpret_cast<const uint4*>(from);
      uint4* t = reinterpret_cast<uint4*>(to);
      for (unsigned long long k = threadIdx.x; k < s.bytes / 16; k += blockDim.x) t[k] = f[k];
    } else {
      for (unsigned long long k = threadIdx.x; k < s.bytes; k += blockDim.x) to[k] = from[k];
    }
  }
}

// Scatter: staged bytes (segment.src) to the blocks (segment.dst).
extern "C" __global__ void objectcache_copy_segments(const unsigned char* src, unsigned char* dst,
                                                     const Segment* segments,
                                                     unsigned long long count) {
  CopySegments(src, dst, segments, count, false);
}

// Gather: the blocks (segment.dst of `src`) to staging (segment.src of `dst`).
extern "C" __global__ void objectcache_gather_segments(const unsigned char* src, unsigned char* dst,
                                                       const Segment* segments,
                                                       unsigned long long count) {
  CopySegments(src, dst, segments, count, true);
}
