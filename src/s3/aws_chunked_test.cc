#include "s3/aws_chunked.h"

#include <gtest/gtest.h>

namespace objectcache::s3 {
namespace {

SigV4Identity ExampleIdentity() {
  SigV4Identity id;
  id.signing_key =
      SigningKey("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3");
  id.amz_date = "20130524T000000Z";
  id.scope = "20130524/us-east-1/s3/aws4_request";
  id.signature = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
  return id;
}

// Encodes `chunks` the way an SDK does, signing each one.
std::string Encode(const std::vector<std::string>& chunks, const SigV4Identity& id) {
  std::string out, prev = id.signature;
  auto add = [&](const std::string& data) {
    std::string sig =
        ChunkSignature(id.signing_key, id.amz_date, id.scope, prev, ToHex(Sha256(data)));
    char size[32];
    std::snprintf(size, sizeof(size), "%zx", data.size());
    out += std::string(size) + ";chunk-signature=" + sig + "\r\n" + data + "\r\n";
    prev = sig;
  };
  for (const std::string& c : chunks) add(c);
  add("");
  return out;
}

std::span<const std::byte> B(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(AwsChunkedTest, DecodesSignedChunksFedInAnyPieces) {
  SigV4Identity id = ExampleIdentity();
  const std::string body = Encode({std::string(65536, 'a'), std::string(1024, 'a')}, id);
  for (size_t piece : {size_t{1}, size_t{13}, size_t{4096}, body.size()}) {
    AwsChunkedDecoder d(ChunkSignatureChain(id), 66560);
    std::string out;
    for (size_t off = 0; off < body.size(); off += piece) {
      auto r = d.Feed(B(std::string_view(body).substr(off, piece)), &out);
      ASSERT_TRUE(r.has_value()) << piece << ": " << r.error().message;
    }
    EXPECT_TRUE(d.Finish().has_value());
    EXPECT_EQ(out, std::string(66560, 'a'));
  }
  // The documented example's chunk signatures come out of our encoder too.
  EXPECT_NE(body.find("ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
            std::string::npos);
}

TEST(AwsChunkedTest, RejectsTamperingAndTruncation) {
  SigV4Identity id = ExampleIdentity();
  const std::string body = Encode({"hello world", "second"}, id);
  auto run = [&](const std::string& b, uint64_t len) -> std::string {
    AwsChunkedDecoder d(ChunkSignatureChain(id), len);
    std::string out;
    if (auto r = d.Feed(B(b), &out); !r) return r.error().code;
    if (auto r = d.Finish(); !r) return r.error().code;
    return "ok";
  };
  EXPECT_EQ(run(body, 17), "ok");
  std::string flipped = body;
  flipped[flipped.find("hello")] = 'j';
  EXPECT_EQ(run(flipped, 17), "SignatureDoesNotMatch");
  EXPECT_EQ(run(body.substr(0, body.size() - 3), 17), "IncompleteBody");
  EXPECT_EQ(run(body, 16), "IncompleteBody");  // more data than declared
  EXPECT_EQ(run(body + "x", 17), "IncompleteBody");
  EXPECT_EQ(run("zz;chunk-signature=abc\r\n", 17), "IncompleteBody");
  EXPECT_EQ(run(std::string(5000, '1'), 17), "IncompleteBody");  // endless header line
}

// AWS's documented example of STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
// (sigv4-streaming-trailers): the same credentials and 66560 bytes of 'a', a CRC-32C trailer and
// its signature.
constexpr char kTrailerSeed[] = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
constexpr char kTrailerLine[] = "x-amz-checksum-crc32c:sOO8/Q==\r\n";
constexpr char kTrailerSignature[] =
    "x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n";

// Decodes `body` as a signed-trailer upload of the example; "ok" or the error's code.
std::string DecodeSignedTrailers(const std::string& body, std::string* out) {
  SigV4Identity id = ExampleIdentity();
  id.signature = kTrailerSeed;
  AwsChunkedDecoder d(ChunkSignatureChain(id), 66560,
                      PayloadChecksum::ForHeader("x-amz-checksum-crc32c"), true);
  for (size_t off = 0; off < body.size(); off += 4093) {
    if (auto r = d.Feed(B(std::string_view(body).substr(off, 4093)), out); !r) {
      return r.error().code;
    }
  }
  if (auto r = d.Finish(); !r) return r.error().code;
  return "ok";
}

TEST(AwsChunkedTest, SignedTrailersMatchAwssDocumentedExample) {
  SigV4Identity id = ExampleIdentity();
  id.signature = kTrailerSeed;
  std::string chunks = Encode({std::string(65536, 'a'), std::string(1024, 'a')}, id);
  // The example's chunk signatures, the final one last.
  for (const char* sig : {"b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
                          "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
                          "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992"}) {
    EXPECT_NE(chunks.find(sig), std::string::npos) << sig;
  }
  chunks.resize(chunks.size() - 2);  // up to the final chunk's line, without the empty one
  // As the SDKs frame it (trailers right after the final chunk, then an empty line), and as the
  // example does (an empty line first, none after the signature).
  const std::string sdk = chunks + kTrailerLine + kTrailerSignature + "\r\n";
  const std::string doc = chunks + "\r\n" + kTrailerLine + kTrailerSignature;
  for (const std::string& body : {sdk, doc}) {
    std::string out;
    EXPECT_EQ(DecodeSignedTrailers(body, &out), "ok");
    EXPECT_EQ(out, std::string(66560, 'a'));
  }
  std::string out;
  // The signature covers the trailer: another value (of the right checksum, even) is refused.
  std::string forged = sdk;
  forged.replace(forged.find("sOO8/Q=="), 8, "AAAAAA==");
  EXPECT_EQ(DecodeSignedTrailers(forged, &out), "BadDigest");
  std::string bad_signature = sdk;
  bad_signature[bad_signature.find("d81f82fc") + 3] = '0';
  EXPECT_EQ(DecodeSignedTrailers(bad_signature, &out), "SignatureDoesNotMatch");
  EXPECT_EQ(DecodeSignedTrailers(chunks + kTrailerLine + "\r\n", &out), "SignatureDoesNotMatch");
  // Nothing after the signature; one signature; a trailer named once.
  EXPECT_EQ(DecodeSignedTrailers(
                chunks + kTrailerLine + kTrailerSignature + "x-amz-meta-a:b\r\n\r\n", &out),
            "IncompleteBody");
  EXPECT_EQ(
      DecodeSignedTrailers(chunks + kTrailerLine + kTrailerLine + kTrailerSignature + "\r\n", &out),
      "IncompleteBody");
  std::string many = chunks;
  for (int i = 0; i < 20; ++i) many += "x-amz-meta-" + std::to_string(i) + ":v\r\n";
  EXPECT_EQ(DecodeSignedTrailers(many, &out), "IncompleteBody");
}

TEST(AwsChunkedTest, UnsignedTrailerForm) {
  std::string body = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
  AwsChunkedDecoder d(std::nullopt, 5);
  std::string out;
  ASSERT_TRUE(d.Feed(B(body), &out).has_value());
  EXPECT_TRUE(d.Finish().has_value());
  EXPECT_EQ(out, "hello");
}

}  // namespace
}  // namespace objectcache::s3

namespace objectcache::s3 {
namespace {

std::string Checksum(std::string_view header, std::string_view data) {
  std::optional<PayloadChecksum> c = PayloadChecksum::ForHeader(header);
  EXPECT_TRUE(c.has_value()) << header;
  c->Update(std::as_bytes(std::span(data.data(), data.size())));
  return c->FinishBase64();
}

TEST(PayloadChecksumTest, MatchesTheStandardCheckValues) {
  EXPECT_EQ(Checksum("x-amz-checksum-crc32", "123456789"), "y/Q5Jg==");   // 0xcbf43926
  EXPECT_EQ(Checksum("x-amz-checksum-crc32c", "123456789"), "4waSgw==");  // 0xe3069283
  EXPECT_EQ(Checksum("x-amz-checksum-sha1", "abc"), "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=");
  EXPECT_EQ(Checksum("x-amz-checksum-sha256", "abc"),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
  // CRC-64/NVME's check value, 0xae8b14860a799888 (the AWS CLI's default checksum).
  EXPECT_EQ(Checksum("x-amz-checksum-crc64nvme", "123456789"), "rosUhgp5mIg=");
  EXPECT_EQ(Checksum("x-amz-checksum-crc64nvme", ""), "AAAAAAAAAAA=");
  EXPECT_FALSE(PayloadChecksum::ForHeader("x-amz-checksum-crc64").has_value());
  EXPECT_FALSE(PayloadChecksum::ForHeader("x-amz-meta-a").has_value());
}

TEST(AwsChunkedTest, TrailerChecksumIsVerified) {
  const std::string good = Checksum("x-amz-checksum-crc32", "hello");
  {
    std::string body = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + good + "\r\n\r\n";
    AwsChunkedDecoder d(std::nullopt, 5, PayloadChecksum::ForHeader("x-amz-checksum-crc32"));
    std::string out;
    ASSERT_TRUE(d.Feed(B(body), &out).has_value());
    EXPECT_TRUE(d.Finish().has_value());
  }
  {
    // Regression: a wrong trailer checksum used to be accepted.
    std::string body = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
    AwsChunkedDecoder d(std::nullopt, 5, PayloadChecksum::ForHeader("x-amz-checksum-crc32"));
    std::string out;
    auto r = d.Feed(B(body), &out);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, "BadDigest");
  }
  {
    std::string body = "5\r\nhello\r\n0\r\n\r\n";  // the announced trailer never comes
    AwsChunkedDecoder d(std::nullopt, 5, PayloadChecksum::ForHeader("x-amz-checksum-crc32"));
    std::string out;
    auto r = d.Feed(B(body), &out);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, "IncompleteBody");
  }
}

}  // namespace
}  // namespace objectcache::s3
