#include "server/conditions.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "server/object_attributes.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// The reference: the same rules computed in 128-bit arithmetic, written the obvious way.
// Returns -1 for "ignore the header", -2 for unsatisfiable, else first * 2^64 + end packed in
// a pair through the out parameters.
int ReferenceRange(bool suffix, bool open, uint64_t a, uint64_t b, uint64_t size, ByteRange* out) {
  __extension__ typedef unsigned __int128 u128;
  if (suffix) {
    if (b == 0 || size == 0) return -2;
    u128 n = b < size ? b : size;
    *out = {static_cast<uint64_t>(u128{size} - n), size};
    return 0;
  }
  if (!open && b < a) return -1;
  if (a >= size) return -2;
  u128 end = open ? u128{size} : u128{b} + 1;
  if (end > size) end = size;
  *out = {a, static_cast<uint64_t>(end)};
  return 0;
}

void CheckAgainstReference(bool suffix, bool open, uint64_t a, uint64_t b, uint64_t size) {
  std::string header = "bytes=";
  if (suffix) {
    header += "-" + std::to_string(b);
  } else {
    header += std::to_string(a) + "-" + (open ? std::string() : std::to_string(b));
  }
  ByteRange want{};
  const int ref = ReferenceRange(suffix, open, a, b, size, &want);
  auto got = EvaluateRange(header, size);
  SCOPED_TRACE(header + " of " + std::to_string(size));
  if (ref == -2) {
    ASSERT_FALSE(got.has_value());
    EXPECT_EQ(got.error().code, "InvalidRange");
    return;
  }
  ASSERT_TRUE(got.has_value());
  if (ref == -1) {
    EXPECT_FALSE(got->has_value());
    return;
  }
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, want);
  EXPECT_LT((*got)->first, (*got)->end);
  EXPECT_LE((*got)->end, size);
}

TEST(RangeTest, ExtremeValuesMatchTheReference) {
  const uint64_t sizes[] = {0, 1, 2, 100, 4096, kMax - 1, kMax};
  std::vector<uint64_t> values = {0, 1, 2, 98, 99, 100, 101, 4095, 4096, kMax - 1, kMax};
  for (uint64_t size : sizes) {
    for (uint64_t a : values) {
      for (uint64_t b : values) {
        for (int form = 0; form < 3; ++form) {
          CheckAgainstReference(form == 2, form == 1, a, b, size);
        }
      }
    }
  }
}

TEST(RangeTest, RandomValuesMatchTheReference) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    // Mix small numbers near the size with full-width ones.
    auto pick = [&]() -> uint64_t {
      switch (rng() % 4) {
        case 0:
          return rng() % 300;
        case 1:
          return kMax - rng() % 300;
        default:
          return rng() >> (rng() % 64);
      }
    };
    CheckAgainstReference(rng() % 3 == 0, rng() % 3 == 0, pick(), pick(), pick());
  }
}

TEST(RangeTest, TheReportedCrashIsA206OfTheRestOfTheObject) {
  // bytes=N-18446744073709551615 used to wrap last + 1 to 0 and crash the server.
  auto got = EvaluateRange("bytes=1-18446744073709551615", 100);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, (ByteRange{1, 100}));
  got = EvaluateRange("bytes=0-18446744073709551615", 100);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, (ByteRange{0, 100}));
}

TEST(RangeTest, NumbersPastU64SaturateInsteadOfBeingIgnored) {
  auto got = EvaluateRange("bytes=5-99999999999999999999999999", 100);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, (ByteRange{5, 100}));
  got = EvaluateRange("bytes=99999999999999999999999999-", 100);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, "InvalidRange");
  got = EvaluateRange("bytes=-99999999999999999999999999", 100);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, (ByteRange{0, 100}));
}

TEST(RangeTest, TheUnitIsNamedInAnyCase) {
  for (const char* h : {"BYTES=2-4", "Bytes=2-4", " bytes=2-4 "}) {
    auto got = EvaluateRange(h, 100);
    ASSERT_TRUE(got.has_value() && got->has_value()) << h;
    EXPECT_EQ(**got, (ByteRange{2, 5})) << h;
  }
}

TEST(RangeTest, MalformedOrMultipleRangesServeTheWholeObject) {
  for (const char* h : {"bytes=", "bytes=-", "bytes=a-b", "bytes=1-2,4-5", "items=0-1", "bytes=1",
                        "bytes=+1-2", "bytes=1-+2", "bytes=5-2", "bytes=0x1-2"}) {
    auto got = EvaluateRange(h, 100);
    ASSERT_TRUE(got.has_value()) << h;
    EXPECT_FALSE(got->has_value()) << h;
  }
}

TEST(RangeTest, EmptyObjectsHaveNoSatisfiableRange) {
  for (const char* h : {"bytes=0-0", "bytes=0-", "bytes=-1"}) {
    auto got = EvaluateRange(h, 0);
    ASSERT_FALSE(got.has_value()) << h;
    EXPECT_EQ(got.error().code, "InvalidRange");
  }
}

TEST(EtagListTest, MatchesQuotedWeakAndStarForms) {
  EXPECT_TRUE(EtagListMatches("\"abc\"", "abc"));
  EXPECT_TRUE(EtagListMatches("abc", "abc"));
  EXPECT_TRUE(EtagListMatches("W/\"abc\"", "abc"));
  EXPECT_TRUE(EtagListMatches("\"x\", \"abc\"", "abc"));
  EXPECT_TRUE(EtagListMatches("*", "abc"));
  EXPECT_FALSE(EtagListMatches("\"abcd\"", "abc"));
  EXPECT_FALSE(EtagListMatches("", "abc"));
  EXPECT_FALSE(EtagListMatches("\"\"", "abc"));
}

TEST(ConditionsTest, FollowTheRfcOrder) {
  const std::string match = "\"e1\"", other = "\"e2\"";
  const std::time_t mtime = 1'700'000'000;
  const std::string before = HttpTime(mtime - 10), after = HttpTime(mtime + 10);
  const std::string at = HttpTime(mtime), junk = "not a date";
  using O = ConditionOutcome;
  auto eval = [&](Conditions c) { return EvaluateConditions(c, "e1", mtime); };
  EXPECT_EQ(eval({}), O::kProceed);
  EXPECT_EQ(eval({.if_match = &match}), O::kProceed);
  EXPECT_EQ(eval({.if_match = &other}), O::kPreconditionFailed);
  // If-Match decides alone: a failing If-Unmodified-Since beside a matching If-Match is ignored.
  EXPECT_EQ(eval({.if_match = &match, .if_unmodified_since = &before}), O::kProceed);
  EXPECT_EQ(eval({.if_unmodified_since = &before}), O::kPreconditionFailed);
  EXPECT_EQ(eval({.if_unmodified_since = &at}), O::kProceed);
  EXPECT_EQ(eval({.if_unmodified_since = &junk}), O::kProceed);
  EXPECT_EQ(eval({.if_none_match = &match}), O::kNotModified);
  EXPECT_EQ(eval({.if_none_match = &other}), O::kProceed);
  // If-None-Match decides alone over If-Modified-Since.
  EXPECT_EQ(eval({.if_none_match = &other, .if_modified_since = &after}), O::kProceed);
  EXPECT_EQ(eval({.if_modified_since = &after}), O::kNotModified);
  EXPECT_EQ(eval({.if_modified_since = &at}), O::kNotModified);
  EXPECT_EQ(eval({.if_modified_since = &before}), O::kProceed);
  EXPECT_EQ(eval({.if_modified_since = &junk}), O::kProceed);
  // 412 comes before 304.
  EXPECT_EQ(eval({.if_match = &other, .if_none_match = &match}), O::kPreconditionFailed);
}

TEST(DeleteConditionsTest, EveryConditionPresentMustHold) {
  const std::time_t mtime = 1'700'000'000;
  const std::string etag = "\"e1\"", star = "*", other = "e2";
  const std::string http = HttpTime(mtime), iso = IsoTime(mtime), size = "100";
  auto holds = [&](const std::string* m, const std::string* t, const std::string* n) {
    S3Result<DeleteConditions> c = ParseDeleteConditions(m, t, n);
    EXPECT_TRUE(c.has_value());
    return DeleteConditionsHold(*c, "e1", mtime, 100);
  };
  EXPECT_FALSE(ParseDeleteConditions(nullptr, nullptr, nullptr)->any());
  EXPECT_TRUE(holds(nullptr, nullptr, nullptr));
  EXPECT_TRUE(holds(&etag, nullptr, nullptr));
  EXPECT_TRUE(holds(&star, nullptr, nullptr));
  EXPECT_FALSE(holds(&other, nullptr, nullptr));
  EXPECT_TRUE(holds(nullptr, &http, nullptr));
  EXPECT_TRUE(holds(nullptr, &iso, nullptr));
  EXPECT_TRUE(holds(&etag, &iso, &size));
  const std::string later = IsoTime(mtime + 1), smaller = "99";
  EXPECT_FALSE(holds(&etag, &later, &size));
  EXPECT_FALSE(holds(&etag, &iso, &smaller));
  // u64 max is a size like any other; past it, and anything not decimal, is refused.
  const std::string max = "18446744073709551615";
  EXPECT_FALSE(holds(nullptr, nullptr, &max));
  EXPECT_TRUE(
      DeleteConditionsHold(*ParseDeleteConditions(nullptr, nullptr, &max), "e", mtime, UINT64_MAX));
  for (std::string bad : {"18446744073709551616", "-1", "1e3", " 1", ""}) {
    EXPECT_EQ(ParseDeleteConditions(nullptr, nullptr, &bad).error().code, "InvalidArgument") << bad;
  }
  // A condition that cannot be read is refused, never dropped.
  for (std::string bad :
       {"yesterday", "2026-11-30", "2026-11-30T14:20:05", "2026-11-30T14:20:05.Z"}) {
    EXPECT_EQ(ParseDeleteConditions(nullptr, &bad, nullptr).error().code, "InvalidArgument") << bad;
  }
  const std::string empty = "";
  EXPECT_EQ(ParseDeleteConditions(&empty, nullptr, nullptr).error().code, "InvalidArgument");
}

TEST(DeleteConditionsTest, IsoTimesRoundTrip) {
  for (std::time_t t : {std::time_t{0}, std::time_t{1'700'000'000}, std::time_t{4'102'444'800}}) {
    EXPECT_EQ(ParseIsoTime(IsoTime(t)), t);
  }
  EXPECT_EQ(ParseIsoTime("2026-11-30T14:20:05.123456Z"), ParseIsoTime("2026-11-30T14:20:05Z"));
}

}  // namespace
}  // namespace objectcache::server
