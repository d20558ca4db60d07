#include "core/name_table.h"

#include <gtest/gtest.h>

namespace objectcache {
namespace {

enum class Fruit { kApple, kPear, kPlum };
constexpr NamedValue<Fruit> kFruitNames[] = {
    {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPlum, "plum"}};
static_assert(ListsEveryValueInOrder(kFruitNames));

enum class Gap { kOne = 1, kThree = 3 };
constexpr NamedValue<Gap> kGapNames[] = {{Gap::kOne, "one"}, {Gap::kThree, "three"}};
static_assert(!ListsEveryValueInOrder(kGapNames, 1));  // kTwo's row would be missing

TEST(NameTableTest, EveryNameParsesBackToItsValue) {
  for (const NamedValue<Fruit>& row : kFruitNames) {
    EXPECT_EQ(NameIn(kFruitNames, row.value), row.name);
    Result<Fruit> parsed = ParseNameIn(kFruitNames, row.name, "fruit");
    ASSERT_TRUE(parsed.has_value()) << row.name;
    EXPECT_EQ(*parsed, row.value);
  }
}

TEST(NameTableTest, AValueOutsideTheTableHasTheUnknownName) {
  EXPECT_EQ(NameIn(kFruitNames, static_cast<Fruit>(7)), "?");
  EXPECT_EQ(NameIn(kFruitNames, static_cast<Fruit>(-1), "none"), "none");
}

TEST(NameTableTest, AnUnknownNameIsRefusedWithTheListOfNames) {
  for (std::string_view bad : {"", "Apple", "apple ", "appl", "plums", "?"}) {
    Result<Fruit> r = ParseNameIn(kFruitNames, bad, "fruit");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.error().message(),
              "unknown fruit '" + std::string(bad) + "' (apple, pear or plum)");
  }
  EXPECT_EQ(NameList(kGapNames), "one or three");
}

}  // namespace
}  // namespace objectcache
