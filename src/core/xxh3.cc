#include "core/xxh3.h"

namespace objectcache {

#ifdef OBJECTCACHE_XXH3_AVX2
namespace xxh3_avx2 {
uint64_t Hash(const void* data, size_t size);
void Reset(void* s);
void Update(void* s, const void* data, size_t size);
uint64_t Digest(const void* s);
}  // namespace xxh3_avx2

namespace {
// Asked once, on first use (so also from other files' static initializers, whose order is not
// known): the CPU's feature bits are read first.
bool Avx2() {
  static const bool avx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
  return avx2;
}
}  // namespace

bool Xxh3UsesAvx2() { return Avx2(); }
uint64_t Xxh3(const void* data, size_t size) {
  return Avx2() ? xxh3_avx2::Hash(data, size) : XXH3_64bits(data, size);
}
void Xxh3Stream::Reset() { Avx2() ? xxh3_avx2::Reset(state()) : (void)XXH3_64bits_reset(state()); }
void Xxh3Stream::Update(const void* data, size_t size) {
  Avx2() ? xxh3_avx2::Update(state(), data, size) : (void)XXH3_64bits_update(state(), data, size);
}
uint64_t Xxh3Stream::Digest() const {
  return Avx2() ? xxh3_avx2::Digest(state()) : XXH3_64bits_digest(state());
}
#else
bool Xxh3UsesAvx2() { return false; }
uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }
void Xxh3Stream::Reset() { XXH3_64bits_reset(state()); }
void Xxh3Stream::Update(const void* data, size_t size) { XXH3_64bits_update(state(), data, size); }
uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state()); }
#endif

}  // namespace objectcache
