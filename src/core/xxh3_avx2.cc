// XXH3 compiled for AVX2 (this file alone is built with -mavx2; core/xxh3.cc calls it only on
// CPUs that have AVX2). It includes nothing but xxhash.h, whose functions XXH_INLINE_ALL makes
// static, so no AVX2 code can stand in for a function another file also defines. It also renames
// the state's type: the state is passed as void*, the same struct from the same header.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace objectcache::xxh3_avx2 {

uint64_t Hash(const void* data, size_t size) { return XXH3_64bits(data, size); }
void Reset(void* s) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(s)); }
void Update(void* s, const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(s), data, size);
}
uint64_t Digest(const void* s) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(s)); }

}  // namespace objectcache::xxh3_avx2
