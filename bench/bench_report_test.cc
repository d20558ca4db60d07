#include "bench/bench_report.h"

#include <gtest/gtest.h>

#include <numeric>

namespace objectcache::bench {
namespace {

TEST(BenchStatisticsTest, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

TEST(BenchStatisticsTest, PercentileIsTheNearestRank) {
  std::vector<double> hundred(100);
  std::iota(hundred.rbegin(), hundred.rend(), 1.0);  // 100, 99, ..., 1: not sorted
  EXPECT_EQ(Percentile(hundred, 0.5), 50);
  EXPECT_EQ(Percentile(hundred, 0.99), 99);
  EXPECT_EQ(Percentile(hundred, 1), 100);
  EXPECT_EQ(Percentile(hundred, 0.001), 1);  // rank rounds up to the first value
  EXPECT_EQ(Percentile({7}, 0.99), 7);
  EXPECT_EQ(Percentile({1, 2}, 0.5), 1);
  EXPECT_EQ(Percentile({}, 0.99), 0);
}

}  // namespace
}  // namespace objectcache::bench
