#include "wire/bounded_json.h"

#include <gtest/gtest.h>

namespace objectcache::wire {
namespace {

TEST(BoundedJsonTest, ParsesDocumentsWithinTheBounds) {
  nlohmann::json j = ParseBoundedJson(R"({"keys": ["a", "b"], "n": {"x": [1, 2.5, null]}})", {});
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["keys"][1], "b");
  EXPECT_EQ(j["n"]["x"][0], 1);
}

TEST(BoundedJsonTest, RefusesDeepNestingBeforeBuildingATree) {
  // Regression: a 9 MB nest of arrays cost about 250 MB to parse.
  std::string deep(4'500'000, '[');
  deep += std::string(4'500'000, ']');
  std::string why;
  EXPECT_TRUE(ParseBoundedJson(deep, {}, &why).is_discarded());
  EXPECT_NE(why.find("nested deeper"), std::string::npos) << why;
  EXPECT_FALSE(ParseBoundedJson("[[[1]]]", {.max_depth = 3}).is_discarded());
  EXPECT_TRUE(ParseBoundedJson("[[[[1]]]]", {.max_depth = 3}).is_discarded());
}

TEST(BoundedJsonTest, RefusesTooManyValues) {
  std::string many = "[";
  for (int i = 0; i < 1000; ++i) many += "1,";
  many += "1]";
  std::string why;
  EXPECT_TRUE(ParseBoundedJson(many, {.max_values = 1000}, &why).is_discarded());
  EXPECT_NE(why.find("more than 1000 values"), std::string::npos) << why;
  EXPECT_FALSE(ParseBoundedJson(many, {.max_values = 1002}).is_discarded());
}

TEST(BoundedJsonTest, MalformedTextIsDiscarded) {
  std::string why;
  EXPECT_TRUE(ParseBoundedJson("{\"a\": ", {}, &why).is_discarded());
  EXPECT_EQ(why, "not valid JSON");
  EXPECT_TRUE(ParseBoundedJson("", {}).is_discarded());
}

}  // namespace
}  // namespace objectcache::wire
