#include "server/object_attributes.h"

#include <gtest/gtest.h>

#include <ctime>
#include <limits>
#include <optional>
#include <random>

namespace objectcache::server {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

void ExpectSame(const ObjectAttributes& got, const ObjectAttributes& want) {
  EXPECT_EQ(got.etag, want.etag);
  EXPECT_EQ(got.content_type, want.content_type);
  EXPECT_EQ(got.user_metadata, want.user_metadata);
  EXPECT_EQ(got.stored_headers, want.stored_headers);
  EXPECT_EQ(got.checksum, want.checksum);
}

TEST(ObjectAttributesTest, AwsChunkedIsHowTheBodyCameNotACodingOfTheObject) {
  // S3 stores Content-Encoding without aws-chunked; an object stored with it was answered
  // "Content-Encoding: aws-chunked" on every GET, a coding no client can undo.
  const std::pair<std::string, std::optional<std::string>> cases[] = {
      {"aws-chunked", std::nullopt},
      {"AWS-Chunked", std::nullopt},
      {"aws-chunked,gzip", "gzip"},
      {"gzip, aws-chunked", "gzip"},
      {" aws-chunked , gzip, br ", "gzip,br"},
      {"gzip", "gzip"},
      {"aws-chunkedx", "aws-chunkedx"},
      {",", std::nullopt}};
  for (const auto& [sent, stored] : cases) {
    const ObjectAttributes a =
        ObjectAttributes::FromRequest({{"content-encoding", sent}, {"cache-control", "no-cache"}});
    Pairs want = {{"cache-control", "no-cache"}};
    if (stored) want.insert(want.begin(), {"content-encoding", *stored});
    EXPECT_EQ(a.stored_headers, want) << sent;
  }
}

TEST(ObjectAttributesTest, WhatIsEncodedDecodesTheSame) {
  ObjectAttributes a;
  a.etag = "0123456789abcdef0123456789abcdef-3";
  a.content_type = "text/plain; charset=\"utf-8\"";
  // Every byte a header value can carry, escapes and UTF-8 included.
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  a.user_metadata = {{"a", "1"},          {"quote\"back\\slash", "tab\there\r\n"},
                     {"utf8", "héllo ☃"}, {"empty", ""},
                     {"", "no name"},     {"bytes", "\x01\x1f\x7f"}};
  a.stored_headers = {{"cache-control", "max-age=5"}, {"expires", "Thu, 01 Jan 1970 00:00:00 GMT"}};
  a.checksum = {{"x-amz-checksum-crc64nvme", "rosUhgp5mIg="}};
  std::optional<ObjectAttributes> back = ObjectAttributes::Decode(a.Encode());
  ASSERT_TRUE(back.has_value());
  ExpectSame(*back, a);

  ObjectAttributes bare;  // no lists: the defaults and nothing else
  bare.etag = "e";
  back = ObjectAttributes::Decode(bare.Encode());
  ASSERT_TRUE(back.has_value());
  ExpectSame(*back, bare);

  ObjectAttributes raw;  // bytes that are not UTF-8 come back as they were replaced on encoding
  raw.user_metadata = {{"k", all}};
  back = ObjectAttributes::Decode(raw.Encode());
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->user_metadata.size(), 1u);
  EXPECT_EQ(back->user_metadata[0].second.substr(0, 127), all.substr(0, 127));
}

TEST(ObjectAttributesTest, AnObjectWithoutAttributesHasTheDefaults) {
  std::optional<ObjectAttributes> a = ObjectAttributes::Decode("");
  ASSERT_TRUE(a.has_value());
  ExpectSame(*a, ObjectAttributes{});
}

TEST(ObjectAttributesTest, DamagedTextIsRefused) {
  for (const char* text : {"{", "{\"e\":\"x\"", "[]", "\"e\"", "17", "null", "{\"e\":\"x\"} {}",
                           "{\"e\":\"\\q\"}", "{\"e\":\"x\",}", "\xff"}) {
    EXPECT_FALSE(ObjectAttributes::Decode(text).has_value()) << text;
  }
}

TEST(ObjectAttributesTest, EntriesOfTheWrongShapeAreSkipped) {
  // As the documented format allows nothing else, whatever else is there is passed over:
  // fields of other types, unknown fields, and list entries that are not two strings.
  std::optional<ObjectAttributes> a = ObjectAttributes::Decode(
      R"({"e":7,"t":["x"],"z":{"e":"inner","m":[["i","j"]]},)"
      R"("m":[["a","1"],["b"],["c","2","3"],["d",4],"e",{"f":"5"},[["g","6"]],["h","7"]],)"
      R"("h":{"cache-control":"x"}})");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->etag, "");
  EXPECT_EQ(a->content_type, ObjectAttributes{}.content_type);
  EXPECT_EQ(a->user_metadata, (Pairs{{"a", "1"}, {"h", "7"}}));
  EXPECT_TRUE(a->stored_headers.empty());

  a = ObjectAttributes::Decode(R"({"h":[["expires","0"]],"e":"tag","t":"a/b","m":[]})");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->etag, "tag");
  EXPECT_EQ(a->content_type, "a/b");
  EXPECT_TRUE(a->user_metadata.empty());
  EXPECT_EQ(a->stored_headers, (Pairs{{"expires", "0"}}));
}

TEST(ObjectAttributesTest, ResponseParametersReplaceTheirHeaderOrNone) {
  ObjectAttributes a;
  a.content_type = "a/b";
  a.stored_headers = {{"cache-control", "no-cache"}};
  EXPECT_EQ(a.OverrideFromQuery({{"response-content-type", "text/plain"},
                                 {"response-cache-control", "max-age=1"},
                                 {"response-content-language", "en\tfr"},
                                 {"response-x-amz-meta-k", "v"},
                                 {"content-type", "not/a-response-parameter"}}),
            std::nullopt);
  EXPECT_EQ(a.content_type, "text/plain");
  EXPECT_EQ(a.stored_headers,
            (Pairs{{"cache-control", "max-age=1"}, {"content-language", "en\tfr"}}));
  EXPECT_TRUE(a.user_metadata.empty());
  // One value with a control character, and nothing is replaced.
  const ObjectAttributes before = a;
  EXPECT_EQ(a.OverrideFromQuery({{"response-content-type", "text/html"},
                                 {"response-expires", "0\r\nSet-Cookie: s=1"}}),
            "response-expires");
  ExpectSame(a, before);
  EXPECT_EQ(a.OverrideFromQuery({{"response-content-encoding", std::string(1, '\x7f')}}),
            "response-content-encoding");
}

TEST(HttpTimeTest, MatchesStrftimeOverFourDigitYears) {
  auto reference = [](std::time_t t) {
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    return std::string(buf);
  };
  // Years 1000 .. 9999 (strftime writes earlier years with fewer digits; below, four).
  constexpr std::time_t kFirst = -30610224000, kLast = 253402300799;
  for (std::time_t t : {std::time_t{0}, std::time_t{951782400} /* 2000-02-29 */, kFirst, kLast,
                        std::time_t{1796268236}}) {
    EXPECT_EQ(HttpTime(t), reference(t)) << t;
  }
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::time_t> any(kFirst, kLast);
  for (int i = 0; i < 10000; ++i) {
    const std::time_t t = any(rng);
    ASSERT_EQ(HttpTime(t), reference(t)) << t;
  }
}

TEST(HttpTimeTest, EarlyYearsHaveFourDigits) {
  EXPECT_EQ(HttpTime(-62135596800), "Mon, 01 Jan 0001 00:00:00 GMT");
}

TEST(HttpTimeTest, TimesOutsideFourDigitYearsReadAsTheEpoch) {
  for (std::time_t t :
       {std::time_t{253402300800}, std::time_t{-62167219201},
        std::numeric_limits<std::time_t>::max(), std::numeric_limits<std::time_t>::min()}) {
    EXPECT_EQ(HttpTime(t), "Thu, 01 Jan 1970 00:00:00 GMT") << t;
  }
}

}  // namespace
}  // namespace objectcache::server
