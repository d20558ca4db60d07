#include "server/s3_body.h"

#include <gtest/gtest.h>

#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/store.h"  // AsBytes
#include "s3/crypto.h"

namespace objectcache::server {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

s3::S3Request Request(Headers headers, std::string key = "k") {
  auto r = s3::ParseS3Request("PUT", "/bkt/" + key, std::move(headers), {});
  EXPECT_TRUE(r.has_value());
  return *r;
}

std::string Md5Base64(std::string_view bytes) { return s3::Base64Encode(s3::Md5(bytes)); }

// Feeds `body` in pieces of `piece` bytes; the error the pipeline answers, or "" and the ETag.
std::pair<std::string, std::string> Check(const s3::S3Request& r, std::optional<uint64_t> length,
                                          std::string_view body, size_t piece = 7,
                                          const std::optional<ModelPreset>& kv = std::nullopt) {
  auto p = BodyPipeline::ForRequest(r, std::nullopt, length, kv);
  if (!p) return {p.error().code, ""};
  for (size_t at = 0; at < body.size(); at += piece) {
    auto fed = (*p)->Feed(AsBytes(body.substr(at, piece)));
    if (!fed) return {fed.error().code, ""};
  }
  auto etag = (*p)->Finish();
  if (!etag) return {etag.error().code, ""};
  return {"", *etag};
}

TEST(BodyPipelineTest, APlainBodyGivesItsMd5AsTheEtag) {
  const std::string body = "the bytes of an object";
  const auto [error, etag] = Check(Request({{"content-md5", Md5Base64(body)}}), body.size(), body);
  EXPECT_EQ(error, "");
  EXPECT_EQ(etag, s3::ToHex(s3::Md5(body)));
}

TEST(BodyPipelineTest, EachConcernAnswersItsOwnError) {
  const std::string body = "0123456789abcdef";
  EXPECT_EQ(Check(Request({}), body.size() + 1, body).first, "IncompleteBody");
  EXPECT_EQ(Check(Request({{"content-md5", Md5Base64("other")}}), body.size(), body).first,
            "BadDigest");
  EXPECT_EQ(Check(Request({{"content-md5", "not base64!"}}), body.size(), body).first,
            "InvalidDigest");
  EXPECT_EQ(
      Check(Request({{"x-amz-content-sha256", std::string(64, '0')}}), body.size(), body).first,
      "XAmzContentSHA256Mismatch");
  EXPECT_EQ(Check(Request({{"x-amz-content-sha256", "SHA-1"}}), body.size(), body).first,
            "InvalidArgument");
  EXPECT_EQ(Check(Request({{"x-amz-checksum-crc32", "AAAAAA=="}}), body.size(), body).first,
            "BadDigest");
  EXPECT_EQ(Check(Request({{"x-amz-checksum-nonsense", "x"}}), body.size(), body).first,
            "InvalidArgument");
  EXPECT_EQ(Check(Request({}), std::nullopt, body).first, "MissingContentLength");
  EXPECT_EQ(Check(Request({{"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
                           {"x-amz-decoded-content-length", "16"}}),
                  std::nullopt, body)
                .first,
            "AccessDenied");  // a signed stream without a signature
}

TEST(BodyPipelineTest, EveryChecksumTheAwsCliSendsIsChecked) {
  // The AWS CLI v2 sends x-amz-checksum-crc64nvme on every upload by default; it was refused.
  const std::string body = "123456789";
  const Headers right[] = {
      {{"x-amz-checksum-crc64nvme", "rosUhgp5mIg="}},  // 0xae8b14860a799888
      {{"x-amz-checksum-crc32", "y/Q5Jg=="}},
      {{"x-amz-checksum-crc32c", "4waSgw=="}},
      {{"x-amz-sdk-checksum-algorithm", "CRC64NVME"},
       {"x-amz-checksum-type", "FULL_OBJECT"},
       {"x-amz-checksum-crc64nvme", "rosUhgp5mIg="}},
  };
  for (const Headers& h : right) {
    EXPECT_EQ(Check(Request(h), body.size(), body).first, "") << h.back().first;
  }
  EXPECT_EQ(Check(Request({{"x-amz-checksum-crc64nvme", "rosUhgp5mIk="}}), body.size(), body).first,
            "BadDigest");
  EXPECT_EQ(Check(Request({{"x-amz-checksum-crc64nvme", "y/Q5Jg=="}}), body.size(), body).first,
            "BadDigest");  // a CRC-32 under the CRC-64's name
  // The same as the trailer of an unsigned aws-chunked body.
  const std::string chunked =
      "9\r\n123456789\r\n0\r\nx-amz-checksum-crc64nvme:rosUhgp5mIg=\r\n\r\n";
  const Headers trailer = {{"x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"},
                           {"content-encoding", "aws-chunked"},
                           {"x-amz-decoded-content-length", "9"},
                           {"x-amz-trailer", "x-amz-checksum-crc64nvme"}};
  EXPECT_EQ(Check(Request(trailer), chunked.size(), chunked),
            std::make_pair(std::string(), s3::ToHex(s3::Md5(body))));
}

TEST(BodyPipelineTest, TheLengthIsAnsweredBeforeTheDigests) {
  const std::string body = "0123456789abcdef";
  EXPECT_EQ(Check(Request({{"content-md5", Md5Base64("other")}}), body.size() + 1, body).first,
            "IncompleteBody");
}

TEST(BodyPipelineTest, AKvBucketTakesOnlyValidChunkObjectsNamedByTheirKey) {
  Result<ModelPreset> model = FindModelPreset("llama-3.1-8b");
  ASSERT_TRUE(model.has_value());
  const ChunkKey key = ChunkKey::FromHex(std::string(32, 'a')).value();
  const std::string kv(model->layout.LayerSliceBytes() * model->layout.num_layers, 'x');
  Result<std::string> object = EncodeChunkObject(model->layout, key, AsBytes(kv));
  ASSERT_TRUE(object.has_value());
  const s3::S3Request named = Request({}, key.ToHex());
  EXPECT_EQ(Check(named, object->size(), *object, 1 << 20, *model).first, "");
  std::string damaged = *object;
  damaged[damaged.size() - 3] ^= 1;
  EXPECT_EQ(Check(named, damaged.size(), damaged, 1 << 20, *model).first, "InvalidChunkObject");
  EXPECT_EQ(Check(Request({}, "not-a-key"), object->size(), *object, 1 << 20, *model).first,
            "InvalidChunkObject");
}

}  // namespace
}  // namespace objectcache::server
