#include "s3/s3_request.h"

#include <gtest/gtest.h>

namespace objectcache::s3 {
namespace {

TEST(S3RequestTest, PathAndVirtualHostedAddressing) {
  auto p = ParseS3Request("GET", "/bkt/a/b%20c.txt?list-type=2&prefix=x%2Fy&flag",
                          {{"host", "127.0.0.1:9000"}}, {"localhost"});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->bucket, "bkt");
  EXPECT_EQ(p->key, "a/b c.txt");
  EXPECT_EQ(*p->Query("prefix"), "x/y");
  EXPECT_TRUE(p->HasQuery("flag"));
  EXPECT_FALSE(p->virtual_host);

  auto v = ParseS3Request("GET", "/a/b.txt", {{"host", "bkt.localhost:9000"}}, {"localhost"});
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->virtual_host);
  EXPECT_EQ(v->bucket, "bkt");
  EXPECT_EQ(v->key, "a/b.txt");

  auto service = ParseS3Request("GET", "/", {{"host", "localhost:9000"}}, {"localhost"});
  EXPECT_EQ(service->bucket, "");
}

TEST(S3RequestTest, MalformedTargetsAreErrors) {
  EXPECT_FALSE(ParseS3Request("GET", "/b/%zz", {}, {}).has_value());
  EXPECT_FALSE(ParseS3Request("GET", "/b/k?x=%4", {}, {}).has_value());
  EXPECT_FALSE(ParseS3Request("GET", "http://evil/", {}, {}).has_value());
}

TEST(S3RequestTest, FramingHeadersComeOnceAndChunkedIsTheOnlyCoding) {
  using Headers = std::vector<std::pair<std::string, std::string>>;
  auto code = [](Headers h) {
    auto r = ParseS3Request("PUT", "/bkt/k", std::move(h), {"localhost"});
    return r ? std::string("ok") : r.error().code;
  };
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", "chunked"}}), "ok");
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", "Chunked"}}), "ok");
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", "gzip, chunked"}}), "NotImplemented");
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", "identity"}}), "NotImplemented");
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", "chunked, chunked"}}), "NotImplemented");
  EXPECT_EQ(code({{"host", "x"}, {"transfer-encoding", ""}}), "NotImplemented");
  EXPECT_EQ(code({{"transfer-encoding", "chunked"}, {"transfer-encoding", "chunked"}}),
            "InvalidRequest");
  EXPECT_EQ(code({{"host", "a.localhost"}, {"host", "b.localhost"}}), "InvalidRequest");
  EXPECT_EQ(code({}), "ok");  // HTTP/1.0 has no Host; SigV4 refuses an unsigned one
}

TEST(S3RequestTest, AHeaderListSplitsAtCommasAndTrimsEachItem) {
  using Items = std::vector<std::string_view>;
  EXPECT_EQ(HeaderListItems(" aws-chunked ,\tgzip, br "), (Items{"aws-chunked", "gzip", "br"}));
  EXPECT_EQ(HeaderListItems("a, ,b,"), (Items{"a", "", "b", ""}));
  EXPECT_EQ(HeaderListItems("one"), (Items{"one"}));
  EXPECT_EQ(HeaderListItems(""), Items{});
  EXPECT_EQ(TrimOws(" \t x y \t"), "x y");
}

TEST(S3RequestTest, UriEncodingIsTheAwsOne) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g+h*", true), "a%20b/c~d_e.f-g%2Bh%2A");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
}

TEST(Utf8Test, AcceptsWellFormedAndRejectsEverythingElse) {
  for (std::string_view good :
       {"", "plain/ascii", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_TRUE(IsValidUtf8(good)) << good;
  }
  // Truncated, bad continuation, overlong '/', overlong, surrogate, above U+10FFFF, 5 bytes.
  for (std::string_view bad :
       {"\xFF", "\xFE\xFF", "\xC3", "\xC3(", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80",
        "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80", "ok\x80"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
  }
}

}  // namespace
}  // namespace objectcache::s3

namespace objectcache::s3 {
namespace {

TEST(ParseDecimalTest, TakesOnlyWholeDecimalNumbersThatFit) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseDecimal("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseDecimal("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  for (const char* bad : {"", "100junk", "1abc", "-1", "+1", " 1", "1 ", "0x10",
                          "18446744073709551616", "99999999999999999999999"}) {
    EXPECT_FALSE(ParseDecimal(bad, &v)) << bad;
  }
}

}  // namespace
}  // namespace objectcache::s3
