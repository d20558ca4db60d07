// Prompts and KV bytes drawn from a seeded generator: the data of the tests and benchmarks, the
// same for the same seed in every run (never secrets: std::mt19937_64 is predictable).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace objectcache {

// The next n bytes of `rng`, eight bytes a draw.
inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(s.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return s;
}

inline std::string SeededBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomBytes(rng, n);
}

// The next n token ids of `rng`, each inside Llama 3's vocabulary of 128256.
inline std::vector<uint32_t> RandomTokens(std::mt19937_64& rng, size_t n) {
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 128256);
  return tokens;
}

inline std::vector<uint32_t> SeededTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomTokens(rng, n);
}

}  // namespace objectcache
