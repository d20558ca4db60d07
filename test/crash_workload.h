// The deterministic write storm shared by the crash test and its writer process.
//
// Thread t of a writer started with seed S performs the operations Op(S, t, 0), Op(S, t, 1),
// ... on the keys it owns (key % kThreads == t), so the test can replay exactly what a killed
// writer was doing. Every value describes itself: its first 16 bytes hold (key, version) and the
// rest is generated from them, so any object read back can be checked bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace objectcache::crash {

inline constexpr int kThreads = 2;
inline constexpr int kKeys = 32;

struct Op {
  bool is_delete = false;
  int key = 0;
  uint64_t version = 0;  // unique over all writers: seed << 32 | thread << 24 | index
  size_t size = 0;
};

inline Op MakeOp(uint32_t seed, int thread, uint32_t index) {
  std::mt19937_64 rng((uint64_t{seed} << 32) ^ (uint64_t(thread) << 24) ^ index);
  Op op;
  op.key = static_cast<int>(rng() % (kKeys / kThreads)) * kThreads + thread;
  op.is_delete = rng() % 8 == 0;
  op.version = (uint64_t{seed} << 32) | (uint64_t(thread) << 24) | index;
  // Mostly small, sometimes a few MiB so that kills land inside writes.
  op.size = 16 + (rng() % 4 == 0 ? rng() % (3 << 20) : rng() % 65536);
  return op;
}

inline std::string KeyName(int key) { return "crash/obj-" + std::to_string(key); }

inline std::string MakeValue(int key, uint64_t version, size_t size) {
  std::string v(size, '\0');
  uint64_t k = static_cast<uint64_t>(key);
  std::memcpy(v.data(), &k, 8);
  std::memcpy(v.data() + 8, &version, 8);
  std::mt19937_64 rng(version * 31 + k);
  for (size_t i = 16; i + 8 <= size; i += 8) {
    uint64_t r = rng();
    std::memcpy(v.data() + i, &r, 8);
  }
  return v;
}

// True when `value` is exactly what MakeValue wrote for `key`; sets *version.
inline bool CheckValue(int key, const std::string& value, uint64_t* version) {
  if (value.size() < 16) return false;
  uint64_t k;
  std::memcpy(&k, value.data(), 8);
  std::memcpy(version, value.data() + 8, 8);
  return k == static_cast<uint64_t>(key) && value == MakeValue(key, *version, value.size());
}

}  // namespace objectcache::crash
