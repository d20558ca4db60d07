// NameSet: the local store's set of object names for presence checks, an open-addressing hash
// table of views (linear probing, at most half full, deletion by backward shift).
//
// A batch lookup of 8192 names in std::unordered_set followed three dependent pointers per name
// (bucket, node, the name's bytes), each a cache miss once the index is cold, and measured
// about 0.3 us a name. Here a slot holds the name's hash beside its view: one miss finds the
// slot, a second compares the bytes, and a batch prefetches the slots of names ahead of the one
// it probes (Prefetch), so the misses of many names overlap.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace objectcache::local {

class NameSet {
 public:
  // `hash` is the name's 64-bit hash (the caller's, the same for every call with a name); the
  // table uses its top bits. The name's bytes must stay put while it is in the set.
  bool Insert(std::string_view name, uint64_t hash) {
    if (2 * (used_ + 1) > slots_.size()) Grow();
    size_t i = Home(hash);
    for (; slots_[i].data != nullptr; i = Next(i)) {
      if (Matches(slots_[i], name, hash)) return false;
    }
    slots_[i] = {hash, name.data(), name.size()};
    used_++;
    return true;
  }

  bool Contains(std::string_view name, uint64_t hash) const {
    if (slots_.empty()) return false;
    for (size_t i = Home(hash); slots_[i].data != nullptr; i = Next(i)) {
      if (Matches(slots_[i], name, hash)) return true;
    }
    return false;
  }

  // Asks the CPU to bring in the slot where a lookup of `hash` starts.
  void Prefetch(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(hash)]);
  }

  bool Erase(std::string_view name, uint64_t hash) {
    if (slots_.empty()) return false;
    size_t i = Home(hash);
    for (; !Matches(slots_[i], name, hash); i = Next(i)) {
      if (slots_[i].data == nullptr) return false;
    }
    // Backward shift: move later entries of the run into the hole when their home does not lie
    // cyclically in (hole, their position], so every entry stays reachable from its home.
    for (size_t hole = i, j = Next(i);; j = Next(j)) {
      if (slots_[j].data == nullptr) {
        slots_[hole] = {};
        break;
      }
      const size_t home = Home(slots_[j].hash);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    used_--;
    return true;
  }

  size_t size() const { return used_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;  // nullptr: empty
    size_t size = 0;
  };

  static bool Matches(const Slot& s, std::string_view name, uint64_t hash) {
    return s.data != nullptr && s.hash == hash && s.size == name.size() &&
           std::memcmp(s.data, name.data(), name.size()) == 0;
  }
  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> shift_); }
  size_t Next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t capacity = old.empty() ? 16 : 2 * old.size();
    slots_.assign(capacity, Slot{});
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (const Slot& s : old) {
      if (s.data == nullptr) continue;
      size_t i = Home(s.hash);
      while (slots_[i].data != nullptr) i = Next(i);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  // a power of two of them, or none
  unsigned shift_ = 64;
  size_t used_ = 0;
};

}  // namespace objectcache::local
