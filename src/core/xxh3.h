// XXH3-64, the checksum of every layer slice and stored object (docs/object-format.md): the
// values libxxhash gives, computed with AVX2 where the CPU has it. Debian builds libxxhash for
// the x86-64 baseline (SSE2); on 64 KiB slices the AVX2 code runs at 41.7 GB/s against 16.3
// on this project's machines, and every byte a retrieval returns is hashed once on its way in.
#pragma once

#include <cstddef>
#include <cstdint>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t: streaming checksums
#include <xxhash.h>

namespace objectcache {

// XXH3-64 of `size` bytes at `data`, seed 0.
uint64_t Xxh3(const void* data, size_t size);

// The same over bytes given in pieces. It places its state on a 64-byte boundary itself: the
// AVX2 code needs 32, and a coroutine frame (GCC's) gives its locals only 16.
class Xxh3Stream {
 public:
  Xxh3Stream() { Reset(); }
  Xxh3Stream(const Xxh3Stream&) = delete;  // the state's place depends on the object's
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Reset();
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  XXH3_state_t* state() {
    return reinterpret_cast<XXH3_state_t*>((reinterpret_cast<uintptr_t>(raw_) + 63) &
                                           ~uintptr_t{63});
  }
  const XXH3_state_t* state() const { return const_cast<Xxh3Stream*>(this)->state(); }

  unsigned char raw_[sizeof(XXH3_state_t) + 64];
};

// Whether the AVX2 code is in use (the CPU has AVX2 and this build has the code).
bool Xxh3UsesAvx2();

}  // namespace objectcache
