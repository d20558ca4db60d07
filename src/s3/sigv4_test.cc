#include "s3/sigv4.h"

#include <gtest/gtest.h>

#include "s3/crypto.h"

namespace objectcache::s3 {
namespace {

constexpr const char* kAccess = "AKIAIOSFODNN7EXAMPLE";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const std::time_t kExampleTime = 1369353600;  // 20130524T000000Z

SecretLookup Secrets() {
  return [](std::string_view ak) -> const std::string* {
    static const std::string secret = kSecret;
    return ak == kAccess ? &secret : nullptr;
  };
}

// The GET example of the AWS S3 SigV4 documentation ("Example: GET Object").
S3Request AwsGetExample() {
  auto r = ParseS3Request(
      "GET", "/test.txt",
      {{"host", "examplebucket.s3.amazonaws.com"},
       {"range", "bytes=0-9"},
       {"x-amz-content-sha256", std::string(kEmptySha256)},
       {"x-amz-date", "20130524T000000Z"},
       {"authorization",
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}},
      {"s3.amazonaws.com"});
  return *r;
}

TEST(SigV4Test, VerifiesTheAwsDocumentationExample) {
  S3Request r = AwsGetExample();
  EXPECT_EQ(r.bucket, "examplebucket");
  EXPECT_EQ(r.key, "test.txt");
  auto id = VerifySigV4(r, Secrets(), kExampleTime + 60, "us-east-1");
  ASSERT_TRUE(id.has_value()) << id.error().code << ": " << id.error().message;
  EXPECT_EQ(id->access_key, kAccess);
}

TEST(SigV4Test, TamperedRequestsAreRejected) {
  {
    S3Request r = AwsGetExample();
    r.headers[1].second = "bytes=0-10";  // a signed header changed
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code,
              "SignatureDoesNotMatch");
  }
  {
    S3Request r = AwsGetExample();
    r.raw_path = "/test.txx";
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code,
              "SignatureDoesNotMatch");
  }
  {
    S3Request r = AwsGetExample();
    r.query.emplace_back("extra", "1");
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code,
              "SignatureDoesNotMatch");
  }
  {
    S3Request r = AwsGetExample();
    r.headers[4].second.replace(r.headers[4].second.find("AKIA"), 4, "AKIB");
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code,
              "InvalidAccessKeyId");
  }
  {
    S3Request r = AwsGetExample();
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime + 16 * 60, "us-east-1").error().code,
              "RequestTimeTooSkewed");
  }
  {
    S3Request r = AwsGetExample();
    r.headers[4].second = "AWS4-HMAC-SHA256 Credential=garbage";
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code,
              "AuthorizationHeaderMalformed");
  }
  {
    S3Request r = AwsGetExample();
    r.headers.erase(r.headers.begin() + 4);
    EXPECT_EQ(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").error().code, "AccessDenied");
  }
}

TEST(SigV4Test, UnsignedHeadersTheServerActsOnAreRefused) {
  for (const char* name : {"x-amz-copy-source", "x-amz-metadata-directive", "content-md5",
                           "x-objectcache-anything", "x-amz-meta-owner"}) {
    S3Request r = AwsGetExample();
    r.headers.emplace_back(name, "/other-bucket/secret");
    auto id = VerifySigV4(r, Secrets(), kExampleTime, "us-east-1");
    ASSERT_FALSE(id.has_value()) << name;
    EXPECT_EQ(id.error().code, "AccessDenied") << name;
    EXPECT_NE(id.error().message.find("not signed"), std::string::npos);
  }
  // Headers the server does not act on may go unsigned, as S3 allows.
  S3Request r = AwsGetExample();
  r.headers.emplace_back("user-agent", "test");
  r.headers.emplace_back("expect", "100-continue");
  EXPECT_TRUE(VerifySigV4(r, Secrets(), kExampleTime, "us-east-1").has_value());
}

TEST(SigV4Test, AScopeForAnotherRegionIsRefused) {
  S3Request r = AwsGetExample();
  auto id = VerifySigV4(r, Secrets(), kExampleTime, "eu-west-1");
  ASSERT_FALSE(id.has_value());
  EXPECT_EQ(id.error().code, "AuthorizationHeaderMalformed");
  EXPECT_NE(id.error().message.find("expecting 'eu-west-1'"), std::string::npos);
}

// An unsigned-payload request with the test credentials at kExampleTime, to sign.
SigningInput TestRequest(std::string method, std::string raw_path,
                         std::vector<std::pair<std::string, std::string>> headers) {
  SigningInput in;
  in.method = std::move(method);
  in.raw_path = std::move(raw_path);
  in.headers = std::move(headers);
  in.payload_hash = std::string(kUnsignedPayload);
  in.access_key = kAccess;
  in.secret_key = kSecret;
  in.time = kExampleTime;
  return in;
}

TEST(SigV4Test, HostMustBeSigned) {
  // No host among the signed headers.
  SigningInput in = TestRequest("GET", "/bucket/key", {{"range", "bytes=0-1"}});
  std::string auth = SignRequest(&in);
  std::vector<std::pair<std::string, std::string>> headers = in.headers;
  headers.emplace_back("host", "127.0.0.1:9000");
  headers.emplace_back("authorization", auth);
  auto r = ParseS3Request("GET", "/bucket/key", headers, {});
  ASSERT_TRUE(r.has_value());
  auto id = VerifySigV4(*r, Secrets(), kExampleTime, "us-east-1");
  ASSERT_FALSE(id.has_value());
  EXPECT_EQ(id.error().code, "AccessDenied");
  EXPECT_NE(id.error().message.find("host"), std::string::npos);
}

TEST(SigV4Test, SignRequestRoundTripsThroughVerify) {
  SigningInput in = TestRequest("PUT", "/bucket/dir/a%20b%2Bc.bin",
                                {{"Host", "127.0.0.1:9000"}, {"Content-Type", "text/plain"}});
  in.query = {{"partNumber", "3"}, {"uploadId", "abc"}};
  std::string auth = SignRequest(&in);
  std::vector<std::pair<std::string, std::string>> headers = in.headers;
  headers.emplace_back("authorization", auth);
  auto r =
      ParseS3Request("PUT", "/bucket/dir/a%20b%2Bc.bin?partNumber=3&uploadId=abc", headers, {});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key, "dir/a b+c.bin");
  auto id = VerifySigV4(*r, Secrets(), kExampleTime, "us-east-1");
  ASSERT_TRUE(id.has_value()) << id.error().message;
  EXPECT_EQ(id->payload_hash, kUnsignedPayload);
}

TEST(SigV4Test, PresignedUrlsExpire) {
  // Build a presigned GET by hand, the way SDKs do.
  const std::string date = "20130524T000000Z";
  const std::string scope = "20130524/us-east-1/s3/aws4_request";
  std::vector<std::pair<std::string, std::string>> query = {
      {"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
      {"X-Amz-Credential", std::string(kAccess) + "/" + scope},
      {"X-Amz-Date", date},
      {"X-Amz-Expires", "86400"},
      {"X-Amz-SignedHeaders", "host"}};
  std::string canonical_query;
  {
    std::vector<std::pair<std::string, std::string>> enc;
    for (auto& [k, v] : query) enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
    std::sort(enc.begin(), enc.end());
    for (auto& [k, v] : enc) canonical_query += (canonical_query.empty() ? "" : "&") + k + "=" + v;
  }
  const std::string creq = "GET\n/test.txt\n" + canonical_query +
                           "\nhost:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD";
  const std::string to_sign =
      "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + ToHex(Sha256(creq));
  const std::string sig =
      ToHex(HmacSha256(SigningKey(kSecret, "20130524", "us-east-1", "s3"), to_sign));
  // The AWS documentation's presigned example has exactly this signature.
  EXPECT_EQ(sig, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  std::string target = "/test.txt?" + canonical_query + "&X-Amz-Signature=" + sig;
  auto r = ParseS3Request("GET", target, {{"host", "examplebucket.s3.amazonaws.com"}},
                          {"s3.amazonaws.com"});
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(VerifySigV4(*r, Secrets(), kExampleTime + 3600, "us-east-1").has_value());
  EXPECT_EQ(VerifySigV4(*r, Secrets(), kExampleTime + 86401, "us-east-1").error().code,
            "AccessDenied");
  std::string tampered = target;
  tampered.replace(tampered.find("86400"), 5, "99999");
  auto t = ParseS3Request("GET", tampered, {{"host", "examplebucket.s3.amazonaws.com"}},
                          {"s3.amazonaws.com"});
  EXPECT_EQ(VerifySigV4(*t, Secrets(), kExampleTime, "us-east-1").error().code,
            "SignatureDoesNotMatch");
}

TEST(SigV4Test, ChunkSignaturesFollowTheAwsStreamingExample) {
  // "Example: PUT Object" of the AWS SigV4 streaming documentation: 64 KiB then 1 KiB of 'a'.
  const std::string key = SigningKey(kSecret, "20130524", "us-east-1", "s3");
  SigV4Identity id;
  id.signing_key = key;
  id.amz_date = "20130524T000000Z";
  id.scope = "20130524/us-east-1/s3/aws4_request";
  id.signature = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
  ChunkSignatureChain chain(id);
  EXPECT_TRUE(chain.Verify(ToHex(Sha256(std::string(65536, 'a'))),
                           "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"));
  EXPECT_TRUE(chain.Verify(ToHex(Sha256(std::string(1024, 'a'))),
                           "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"));
  EXPECT_FALSE(chain.Verify(std::string(kEmptySha256),
                            "0000000000000000000000000000000000000000000000000000000000000000"));
  EXPECT_TRUE(chain.Verify(std::string(kEmptySha256),
                           "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"));
}

}  // namespace
}  // namespace objectcache::s3
