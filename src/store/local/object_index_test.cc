// ObjectIndex against plain containers as the model: random inserts, replacements, erases,
// touches and listings over names of every kind (chunk names whose hex digits are packed, names
// that only look like them, records), through table growth, merges and arena compactions.
#include "store/local/object_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "store/local/index.h"

namespace objectcache::local {
namespace {

std::string RandomHex(std::mt19937_64& rng, size_t digits, const char* alphabet) {
  std::string s;
  for (size_t i = 0; i < digits; ++i) s += alphabet[rng() % 16];
  return s;
}

// Names of every shape the encoding tells apart.
std::vector<std::string> NamePool(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> pool;
  for (size_t i = 0; i < n; ++i) {
    const std::string hex = RandomHex(rng, 32, "0123456789abcdef");
    switch (i % 8) {
      case 0:
        pool.push_back(hex);
        break;  // a bare chunk key
      case 1:
        pool.push_back("kv/" + hex);
        break;  // a chunk object
      case 2:
        pool.push_back("kv2/" + hex);
        break;  // another prefix
      case 3:
        pool.push_back("kv/" + RandomHex(rng, 32, "0123456789ABCDEF"));
        break;  // upper
      case 4:
        pool.push_back("kv/" + hex.substr(0, 31));
        break;  // one digit short
      case 5:
        pool.push_back(".bucket/b" + std::to_string(rng() % 1000));
        break;  // a record
      case 6:
        pool.push_back("kv/" + hex + "x");
        break;  // digits, then more
      default:
        pool.push_back("b/" + std::to_string(rng()));
        break;
    }
  }
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  return pool;
}

struct ModelEntry {
  uint64_t size = 0;
  uint64_t stamp = 0;
};

std::vector<std::string> NamesInOrder(ObjectIndex& index) {
  std::vector<std::string> names;
  index.ForEachInNameOrder([&](EntryId id) { names.push_back(index.Name(id)); });
  return names;
}

// The model's least recently used name that is not a record, or "".
std::string ModelOldest(const std::map<std::string, ModelEntry>& model) {
  std::string oldest;
  uint64_t stamp = UINT64_MAX;
  for (const auto& [name, e] : model) {
    if (!IsRecordName(name) && e.stamp < stamp) {
      stamp = e.stamp;
      oldest = name;
    }
  }
  return oldest;
}

void ExpectSameListing(ObjectIndex& index, const std::map<std::string, ModelEntry>& model,
                       const ListOptions& options) {
  std::vector<ObjectInfo> got;
  index.CollectListCandidates(options, &got);
  std::vector<ObjectInfo> want;
  const bool after = options.start_after >= options.prefix;
  auto it = after ? model.upper_bound(options.start_after) : model.lower_bound(options.prefix);
  for (; it != model.end() && want.size() <= options.max_keys; ++it) {
    if (!it->first.starts_with(options.prefix)) break;
    want.push_back({it->first, it->second.size});
  }
  ASSERT_EQ(got.size(), want.size()) << options.prefix << " after " << options.start_after;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key);
    EXPECT_EQ(got[i].size, want[i].size);
  }
}

TEST(ObjectIndexTest, AgreesWithAModelThroughChurn) {
  std::mt19937_64 rng(7);
  const std::vector<std::string> pool = NamePool(rng, 6000);
  ObjectIndex index;
  std::map<std::string, ModelEntry> model;
  uint64_t clock = 0;
  for (int step = 0; step < 120000; ++step) {
    const std::string& name = pool[rng() % pool.size()];
    const uint64_t hash = KeyHash(name);
    const EntryId id = index.Find(name, hash);
    ASSERT_EQ(id != kNoEntry, model.contains(name)) << name;
    switch (rng() % 4) {
      case 0:
      case 1: {  // put (new or replacing)
        ASSERT_TRUE(index.HasRoomFor(name));
        auto [got, inserted] = index.Insert(name, hash);
        ASSERT_EQ(inserted, id == kNoEntry);
        if (!inserted) {
          ASSERT_EQ(got, id);
        }
        const uint64_t size = rng() % 3 == 0 ? ObjectIndex::kMaxObjectBytes : rng() % 100000;
        index.set_size(got, size);
        index.Touch(got, ++clock);
        model[name] = {size, clock};
        break;
      }
      case 2:  // delete
        if (id != kNoEntry) {
          index.Erase(id);
          model.erase(name);
        }
        break;
      default:  // read
        if (id != kNoEntry) {
          EXPECT_EQ(index.Name(id), name);
          EXPECT_EQ(index.size(id), model[name].size);
          EXPECT_EQ(index.is_record(id), IsRecordName(name));
          index.Touch(id, ++clock);
          model[name].stamp = clock;
        }
    }
    ASSERT_EQ(index.size(), model.size());
    if (step % 10 == 0) {
      const EntryId oldest = index.LeastRecent();
      ASSERT_EQ(oldest == kNoEntry ? "" : index.Name(oldest), ModelOldest(model)) << step;
    }
    if (step % 5000 == 0) {
      const std::string& from = pool[rng() % pool.size()];
      ExpectSameListing(index, model, {.prefix = "", .start_after = from, .max_keys = 50});
      ExpectSameListing(index, model, {.prefix = "kv/", .start_after = "", .max_keys = 1000});
      ExpectSameListing(index, model, {.prefix = "kv/", .start_after = from, .max_keys = 7});
      ExpectSameListing(index, model, {.prefix = ".bucket/", .start_after = "", .max_keys = 5});
    }
  }
  std::vector<std::string> want;
  for (const auto& [name, e] : model) want.push_back(name);
  EXPECT_EQ(NamesInOrder(index), want);
  // Eviction order: the least recent object each time, never a record.
  while (index.LeastRecent() != kNoEntry) {
    const EntryId e = index.LeastRecent();
    ASSERT_EQ(index.Name(e), ModelOldest(model));
    model.erase(index.Name(e));
    index.Erase(e);
  }
  for (const auto& [name, e] : model) EXPECT_TRUE(IsRecordName(name)) << name;
}

TEST(ObjectIndexTest, CompactionKeepsEveryEntryAndGivesTheMemoryBack) {
  std::mt19937_64 rng(11);
  std::vector<std::string> names;
  for (int i = 0; i < 100000; ++i) names.push_back("kv/" + RandomHex(rng, 32, "0123456789abcdef"));
  ObjectIndex index;
  for (size_t i = 0; i < names.size(); ++i) {
    auto [id, inserted] = index.Insert(names[i], KeyHash(names[i]));
    ASSERT_TRUE(inserted);
    index.set_size(id, i);
    index.Touch(id, i + 1);
    if (i % 10 == 0) index.set_pinned_until(id, static_cast<int64_t>(i) + 5);
  }
  const size_t full = index.MemoryBytes();
  // A 48-byte record for a 35-character name, 4 bytes of name order, the hash table's 4-byte
  // slots (here 38% full) and the last block's free part.
  EXPECT_LT(full, 72 * names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (i % 10 != 0) index.Erase(index.Find(names[i], KeyHash(names[i])));
  }
  EXPECT_LT(index.MemoryBytes(), full / 2);
  ASSERT_EQ(index.size(), names.size() / 10);
  for (size_t i = 0; i < names.size(); ++i) {
    const EntryId id = index.Find(names[i], KeyHash(names[i]));
    ASSERT_EQ(id != kNoEntry, i % 10 == 0) << i;
    if (id == kNoEntry) continue;
    EXPECT_EQ(index.Name(id), names[i]);
    EXPECT_EQ(index.size(id), i);
    EXPECT_EQ(index.pinned_until(id), static_cast<int64_t>(i) + 5);
  }
  // The recency order survived the renumbering: oldest first.
  for (size_t i = 0; i < names.size(); i += 10) {
    const EntryId e = index.LeastRecent();
    ASSERT_EQ(index.Name(e), names[i]);
    index.Erase(e);
  }
  EXPECT_EQ(index.size(), 0u);
}

TEST(ObjectIndexTest, LoadingOrdersNamesAndRecency) {
  std::mt19937_64 rng(3);
  std::vector<std::string> pool = NamePool(rng, 5000);
  std::shuffle(pool.begin(), pool.end(), rng);
  ObjectIndex index;
  index.BeginLoading(pool.size());
  std::map<std::string, ModelEntry> model;
  for (size_t i = 0; i < pool.size(); ++i) {
    auto [id, inserted] = index.Insert(pool[i], KeyHash(pool[i]));
    ASSERT_TRUE(inserted);
    const uint64_t stamp = rng() % 1000000;
    index.set_size(id, i);
    index.set_stamp(id, stamp);
    model[pool[i]] = {i, stamp};
  }
  index.FinishLoading();
  std::vector<std::string> want;
  for (const auto& [name, e] : model) want.push_back(name);
  EXPECT_EQ(NamesInOrder(index), want);
  ExpectSameListing(index, model, {.prefix = "kv/", .start_after = "kv/8", .max_keys = 100});
  // Later inserts join the order.
  auto [id, inserted] = index.Insert("kv/zz", KeyHash("kv/zz"));
  ASSERT_TRUE(inserted);
  index.Touch(id, 2000000);
  model["kv/zz"] = {0, 2000000};
  ExpectSameListing(index, model, {.prefix = "kv/", .start_after = "kv/f", .max_keys = 100});
  uint64_t last = 0;
  while (index.LeastRecent() != kNoEntry) {
    const EntryId e = index.LeastRecent();
    EXPECT_GE(index.stamp(e), last);
    last = index.stamp(e);
    index.Erase(e);
  }
  EXPECT_EQ(last, 2000000u);
}

TEST(ObjectIndexTest, RefusesNamesItCannotHold) {
  ObjectIndex index;
  const std::string too_long(kMaxKeyBytes + 1, 'a');
  EXPECT_EQ(index.Find(too_long, KeyHash(too_long)), kNoEntry);
  EXPECT_EQ(index.Find("", KeyHash("")), kNoEntry);
  const std::string longest(kMaxKeyBytes, 'f');  // all hex: its tail is packed
  auto [id, inserted] = index.Insert(longest, KeyHash(longest));
  ASSERT_TRUE(inserted);
  EXPECT_EQ(index.Name(id), longest);
  EXPECT_EQ(index.Find(longest, KeyHash(longest)), id);
}

}  // namespace
}  // namespace objectcache::local
