#include "s3/sigv2.h"

#include <gtest/gtest.h>

#include "s3/crypto.h"

namespace objectcache::s3 {
namespace {

constexpr const char* kAccess = "AKIAIOSFODNN7EXAMPLE";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
// Tue, 27 Mar 2007 19:36:42 GMT
constexpr std::time_t kExampleTime = 1175024202;

SecretLookup Secrets() {
  return [](std::string_view ak) -> const std::string* {
    static const std::string secret = kSecret;
    return ak == kAccess ? &secret : nullptr;
  };
}

// The GET example of the S3 developer guide's "Signing and authenticating REST requests".
S3Request GuideExample(std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<std::pair<std::string, std::string>> headers = {
      {"host", "johnsmith.s3.amazonaws.com"},
      {"date", "Tue, 27 Mar 2007 19:36:42 +0000"},
      {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU="}};
  for (auto& h : extra) headers.push_back(std::move(h));
  return *ParseS3Request("GET", "/photos/puppy.jpg", headers, {"s3.amazonaws.com"});
}

TEST(SigV2Test, VerifiesTheDeveloperGuideExample) {
  S3Request r = GuideExample();
  ASSERT_TRUE(IsSigV2(r));
  EXPECT_EQ(SigV2StringToSign(r, "Tue, 27 Mar 2007 19:36:42 +0000"),
            "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/johnsmith/photos/puppy.jpg");
  auto id = VerifySigV2(r, Secrets(), kExampleTime + 60);
  ASSERT_TRUE(id.has_value()) << id.error().code << ": " << id.error().message;
  EXPECT_EQ(id->access_key, kAccess);
  EXPECT_EQ(id->signature_version, 2);
  EXPECT_EQ(id->payload_hash, kUnsignedPayload);
}

TEST(SigV2Test, TamperingReplaysAndUncoveredHeadersAreRefused) {
  {
    S3Request r = GuideExample();
    r.raw_path = "/photos/kitten.jpg";
    EXPECT_EQ(VerifySigV2(r, Secrets(), kExampleTime).error().code, "SignatureDoesNotMatch");
  }
  {
    // x-amz-* headers are signed in SigV2: an added one breaks the signature.
    S3Request r = GuideExample({{"x-amz-copy-source", "/other/key"}});
    EXPECT_EQ(VerifySigV2(r, Secrets(), kExampleTime).error().code, "SignatureDoesNotMatch");
  }
  {
    // A sub-resource is part of the signed resource.
    auto r = ParseS3Request("GET", "/photos/puppy.jpg?acl", GuideExample().headers,
                            {"s3.amazonaws.com"});
    EXPECT_EQ(VerifySigV2(*r, Secrets(), kExampleTime).error().code, "SignatureDoesNotMatch");
  }
  {
    // Our own headers are not covered by SigV2 at all: refused, never trusted.
    S3Request r = GuideExample({{"x-objectcache-kv-layout", "llama-3.1-8b"}});
    auto id = VerifySigV2(r, Secrets(), kExampleTime);
    ASSERT_FALSE(id.has_value());
    EXPECT_EQ(id.error().code, "AccessDenied");
  }
  EXPECT_EQ(VerifySigV2(GuideExample(), Secrets(), kExampleTime + 16 * 60).error().code,
            "RequestTimeTooSkewed");
  {
    S3Request r = GuideExample();
    r.headers[2].second = "AWS AKIDUNKNOWN:bWq2s1WEIj+Ydj0vQ697zp+IXMU=";
    EXPECT_EQ(VerifySigV2(r, Secrets(), kExampleTime).error().code, "InvalidAccessKeyId");
  }
}

TEST(SigV2Test, PresignedUrlsExpireAndLiveAtMostSevenDays) {
  const std::time_t expires = kExampleTime + 3600;
  S3Request base = *ParseS3Request("GET", "/photos/puppy.jpg",
                                   {{"host", "johnsmith.s3.amazonaws.com"}}, {"s3.amazonaws.com"});
  const std::string sig =
      Base64Encode(HmacSha1(kSecret, SigV2StringToSign(base, std::to_string(expires))));
  auto url = [&](std::time_t exp) {
    return "/photos/puppy.jpg?AWSAccessKeyId=" + std::string(kAccess) +
           "&Expires=" + std::to_string(exp) + "&Signature=" + UriEncode(sig, false);
  };
  auto r = ParseS3Request("GET", url(expires), base.headers, {"s3.amazonaws.com"});
  ASSERT_TRUE(IsSigV2(*r));
  auto id = VerifySigV2(*r, Secrets(), kExampleTime);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  EXPECT_TRUE(id->presigned);
  EXPECT_EQ(VerifySigV2(*r, Secrets(), expires + 1).error().code, "AccessDenied");
  auto later = ParseS3Request("GET", url(expires + 60), base.headers, {"s3.amazonaws.com"});
  EXPECT_EQ(VerifySigV2(*later, Secrets(), kExampleTime).error().code, "SignatureDoesNotMatch");
  auto too_long =
      ParseS3Request("GET", url(kExampleTime + 8 * 24 * 3600), base.headers, {"s3.amazonaws.com"});
  EXPECT_EQ(VerifySigV2(*too_long, Secrets(), kExampleTime).error().code,
            "AuthorizationQueryParametersError");
}

}  // namespace
}  // namespace objectcache::s3
