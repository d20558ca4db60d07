#include "core/seeded_data.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace objectcache {
namespace {

TEST(SeededDataTest, TheSameSeedGivesTheSameBytesAtEveryLength) {
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 4096, 4099}) {
    const std::string a = SeededBytes(n, 42);
    EXPECT_EQ(a.size(), n);
    EXPECT_EQ(a, SeededBytes(n, 42)) << n;
    // A shorter draw is the start of a longer one: the bytes are the generator's stream.
    EXPECT_EQ(a, SeededBytes(n + 5, 42).substr(0, n)) << n;
  }
  EXPECT_NE(SeededBytes(64, 1), SeededBytes(64, 2));
}

TEST(SeededDataTest, EveryByteIsDrawnNotLeftZero) {
  // The last bytes of a length that is not a multiple of 8 come from a draw of their own.
  const std::string s = SeededBytes(1003, 7);
  size_t zeros = 0;
  for (char c : s) zeros += c == 0;
  EXPECT_LT(zeros, 20u);  // about 4 expected of 1003 uniform bytes
  std::set<char> tail(s.end() - 3, s.end());
  EXPECT_FALSE(tail.size() == 1 && *tail.begin() == 0);
}

TEST(SeededDataTest, DrawsFromOneGeneratorFollowEachOther) {
  std::mt19937_64 rng(9);
  const std::vector<uint32_t> tokens = RandomTokens(rng, 100);
  const std::string kv = RandomBytes(rng, 16);
  std::mt19937_64 again(9);
  EXPECT_EQ(RandomTokens(again, 100), tokens);
  EXPECT_EQ(RandomBytes(again, 16), kv);
  EXPECT_EQ(SeededTokens(100, 9), tokens);
  for (uint32_t t : tokens) EXPECT_LT(t, 128256u);
}

}  // namespace
}  // namespace objectcache
