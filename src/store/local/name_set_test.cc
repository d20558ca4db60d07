// NameSet against std::set as the model: random inserts, erases and lookups, with hashes
// squeezed into few values so that runs of collisions, wrap-around and backward shifts happen.
#include "store/local/name_set.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace objectcache::local {
namespace {

TEST(NameSetTest, AgreesWithASetThroughInsertsErasesAndGrowth) {
  for (const uint64_t hash_values : {uint64_t{3}, uint64_t{64}, uint64_t{1} << 40}) {
    SCOPED_TRACE(hash_values);
    std::mt19937_64 rng(hash_values);
    // Hashes with few distinct top bits (the table's home) pile names into long runs.
    auto hash = [&](const std::string& s) {
      return (std::hash<std::string>()(s) % hash_values) * (~uint64_t{0} / hash_values);
    };
    std::vector<std::string> pool;  // the names' bytes stay put: the set holds views
    pool.reserve(3000);
    for (int i = 0; i < 3000; ++i) pool.push_back("bucket/" + std::to_string(rng()));
    NameSet set;
    std::set<std::string> model;
    for (int step = 0; step < 40000; ++step) {
      const std::string& name = pool[rng() % pool.size()];
      switch (rng() % 3) {
        case 0:
          ASSERT_EQ(set.Insert(name, hash(name)), model.insert(name).second);
          break;
        case 1:
          ASSERT_EQ(set.Erase(name, hash(name)), model.erase(name) == 1);
          break;
        default:
          ASSERT_EQ(set.Contains(name, hash(name)), model.contains(name));
      }
      ASSERT_EQ(set.size(), model.size());
    }
    for (const std::string& name : pool) {
      ASSERT_EQ(set.Contains(name, hash(name)), model.contains(name)) << name;
    }
  }
}

TEST(NameSetTest, AnEmptySetHoldsNothingAndErasesNothing) {
  NameSet set;
  set.Prefetch(42);
  EXPECT_FALSE(set.Contains("a", 42));
  EXPECT_FALSE(set.Erase("a", 42));
  EXPECT_TRUE(set.Insert("a", 42));
  EXPECT_FALSE(set.Contains("b", 42));  // same hash, other name
  EXPECT_FALSE(set.Insert("a", 42));
  EXPECT_TRUE(set.Erase("a", 42));
  EXPECT_EQ(set.size(), 0u);
}

}  // namespace
}  // namespace objectcache::local
