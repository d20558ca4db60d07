// The S3 handlers over a memory store through an in-memory exchange: no sockets, no processes,
// no signatures (anonymous mode). The Python suites drive the same handlers over HTTP with real
// clients; these pin each handler's own behaviour, deterministically. The layerwise response
// against misbehaving stores is in layerwise_test.cc, the body checks in s3_body_test.cc.
#include "server/s3_handler.h"

#include <gtest/gtest.h>

#include <regex>

#include "objectcache/chunk_object.h"
#include "objectcache/kv_layout.h"
#include "s3/crypto.h"
#include "server/memory_exchange.h"
#include "store/local/local_store.h"
#include "store/memory/memory_store.h"
#include "store/scratch_dir.h"
#include "wire/lookup_wire.h"

namespace objectcache::server {
namespace {

// Every match of `pattern`'s first group in `xml`, in order.
std::vector<std::string> All(const std::string& xml, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

std::string Code(const MemoryHttpExchange& ex) {
  std::vector<std::string> codes = All(ex.response_body(), "<Code>([^<]*)</Code>");
  return codes.empty() ? std::string() : codes[0];
}

class S3HandlerTest : public ::testing::Test {
 protected:
  S3HandlerTest() : S3HandlerTest(NewMemoryStore()) {}
  explicit S3HandlerTest(std::unique_ptr<Store> store)
      : store_(std::move(store)), handler_(store_.get(), &metrics_, Options()) {}

  static S3Options Options() {
    S3Options o;
    o.anonymous = true;
    o.blocking_threads = 2;
    o.io_buffer_bytes = 64 << 10;  // several pieces for a body of a few hundred KiB
    return o;
  }

  std::unique_ptr<MemoryHttpExchange> Call(std::string method, std::string target,
                                           std::string body = "", Headers headers = {},
                                           std::function<void()> before_body = nullptr) {
    headers.emplace_back("host", "127.0.0.1");
    auto ex = std::make_unique<MemoryHttpExchange>(std::move(method), std::move(target),
                                                   std::move(headers), std::move(body), 7000);
    ex->SetSendsFiles(sends_files_);
    if (before_body) ex->BeforeFirstBodyRead(std::move(before_body));
    RunExchange(io_, handler_, *ex);
    EXPECT_EQ(ex->responses(), 1);
    EXPECT_TRUE(ex->complete());
    return ex;
  }

  // Status of a call, with its error code when it has one ("200", "404 NoSuchKey").
  std::string Answer(std::string method, std::string target, std::string body = "",
                     Headers headers = {}) {
    auto ex = Call(std::move(method), std::move(target), std::move(body), std::move(headers));
    const std::string code = Code(*ex);
    return std::to_string(ex->status()) + (code.empty() ? "" : " " + code);
  }

  std::string Get(const std::string& path) {
    auto ex = Call("GET", path);
    EXPECT_EQ(ex->status(), 200u) << path << ": " << ex->response_body();
    return ex->response_body();
  }

  void Put(const std::string& path, const std::string& body) {
    EXPECT_EQ(Answer("PUT", path, body), "200") << path;
  }

  bool sends_files_ = false;  // what each exchange offers (HttpExchange::sends_files)
  ServerMetrics metrics_;
  std::unique_ptr<Store> store_;
  asio::io_context io_;  // outlives the handler, whose pool may still be posting to it
  S3Handler handler_;
};

TEST_F(S3HandlerTest, NewBucketNamesFollowAwsRules) {
  for (const char* name : {"ab", "Abc", "a_b", "-abc", "abc-", "a..b", "a.-b", "a-.b",
                           "192.168.5.4", "xn--abc", "sthree-abc", "abc-s3alias", "abc--ol-s3",
                           "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij"}) {
    EXPECT_EQ(Answer("PUT", std::string("/") + name, ""), "400 InvalidBucketName") << name;
  }
  for (const char* name :
       {"abc", "a.b.c", "1.2.3", "1.2.3.4.5", "192.168.5.4a", "my-bucket.v2", "0ab"}) {
    EXPECT_EQ(Answer("PUT", std::string("/") + name, ""), "200") << name;
  }
}

TEST_F(S3HandlerTest, ListingWithPrefixesDelimitersAndContinuation) {
  Put("/lst", "");
  for (const char* k : {"a/1", "a/2", "b/1", "c", "d", "e/f/g"}) Put(std::string("/lst/") + k, k);
  std::string xml = Get("/lst?list-type=2&delimiter=%2F");
  EXPECT_EQ(All(xml, "<Key>([^<]*)</Key>"), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(All(xml, "<Prefix>([^<]+)</Prefix>"), (std::vector<std::string>{"a/", "b/", "e/"}));
  xml = Get("/lst?list-type=2&prefix=e%2F&delimiter=%2F");
  EXPECT_EQ(All(xml, "<CommonPrefixes><Prefix>([^<]*)</Prefix>"),
            (std::vector<std::string>{"e/f/"}));
  // One name a page, with the tokens the server hands out: every name once, in order.
  std::vector<std::string> seen;
  std::string token;
  for (int pages = 0; pages < 10; ++pages) {
    xml = Get("/lst?list-type=2&max-keys=1" +
              (token.empty() ? "" : "&continuation-token=" + s3::UriEncode(token, false)));
    for (const std::string& k : All(xml, "<Key>([^<]*)</Key>")) seen.push_back(k);
    const std::vector<std::string> next =
        All(xml, "<NextContinuationToken>([^<]*)</NextContinuationToken>");
    if (next.empty()) break;
    token = next[0];
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"a/1", "a/2", "b/1", "c", "d", "e/f/g"}));
  EXPECT_EQ(All(Get("/lst?list-type=2&start-after=c"), "<Key>([^<]*)</Key>"),
            (std::vector<std::string>{"d", "e/f/g"}));
  // v1: marker, and NextMarker with a delimiter.
  xml = Get("/lst?delimiter=%2F&max-keys=2&marker=a%2F");
  EXPECT_EQ(All(xml, "<Prefix>([^<]+)</Prefix>"), (std::vector<std::string>{"b/"}));
  EXPECT_EQ(All(xml, "<Key>([^<]*)</Key>"), (std::vector<std::string>{"c"}));
  EXPECT_EQ(All(xml, "<NextMarker>([^<]*)</NextMarker>"), (std::vector<std::string>{"c"}));
  EXPECT_EQ(Answer("GET", "/lst?list-type=2&continuation-token=%25"), "400 InvalidArgument");
  EXPECT_EQ(Answer("GET", "/missing-bucket?list-type=2"), "404 NoSuchBucket");
}

TEST_F(S3HandlerTest, MultipartCompletionAndAbort) {
  Put("/mpu", "");
  const std::string part1(5 << 20, 'x'), part2 = "tail";
  auto created = Call("POST", "/mpu/obj?uploads");
  const std::string id = All(created->response_body(), "<UploadId>([^<]*)</UploadId>").at(0);
  std::vector<std::string> etags;
  for (const auto& [n, body] : {std::pair{1, part1}, std::pair{2, part2}}) {
    auto up = Call("PUT", "/mpu/obj?partNumber=" + std::to_string(n) + "&uploadId=" + id, body);
    ASSERT_EQ(up->status(), 200u) << up->response_body();
    etags.push_back(*up->ResponseHeader("ETag"));
  }
  auto parts = Get("/mpu/obj?uploadId=" + id);
  EXPECT_EQ(All(parts, "<Size>([^<]*)</Size>"), (std::vector<std::string>{"5242880", "4"}));
  // Out of order, then a wrong ETag: refused, nothing made.
  std::string out_of_order = "<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>" +
                             etags[1] + "</ETag></Part><Part><PartNumber>1</PartNumber><ETag>" +
                             etags[0] + "</ETag></Part></CompleteMultipartUpload>";
  EXPECT_EQ(Answer("POST", "/mpu/obj?uploadId=" + id, out_of_order), "400 InvalidPartOrder");
  std::string wrong =
      "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"00\""
      "</ETag></Part></CompleteMultipartUpload>";
  EXPECT_EQ(Answer("POST", "/mpu/obj?uploadId=" + id, wrong), "400 InvalidPart");
  EXPECT_EQ(Answer("GET", "/mpu/obj"), "404 NoSuchKey");
  std::string complete = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" +
                         etags[0] + "</ETag></Part><Part><PartNumber>2</PartNumber><ETag>" +
                         etags[1] + "</ETag></Part></CompleteMultipartUpload>";
  auto done = Call("POST", "/mpu/obj?uploadId=" + id, complete);
  ASSERT_EQ(done->status(), 200u) << done->response_body();
  std::string md5s;
  for (const std::string& body : {part1, part2}) md5s += s3::Md5(body);
  const std::string want = "\"" + s3::ToHex(s3::Md5(md5s)) + "-2\"";
  EXPECT_EQ(All(done->response_body(), "<ETag>([^<]*)</ETag>").at(0),
            "&quot;" + want.substr(1, want.size() - 2) + "&quot;");
  EXPECT_EQ(Get("/mpu/obj"), part1 + part2);
  // The same complete again (a retry): the same answer.
  auto again = Call("POST", "/mpu/obj?uploadId=" + id, complete);
  EXPECT_EQ(again->response_body(), done->response_body());
  // Abort: the upload and its parts are gone.
  auto other = Call("POST", "/mpu/other?uploads");
  const std::string id2 = All(other->response_body(), "<UploadId>([^<]*)</UploadId>").at(0);
  EXPECT_EQ(Answer("PUT", "/mpu/other?partNumber=1&uploadId=" + id2, "p"), "200");
  EXPECT_EQ(Answer("DELETE", "/mpu/other?uploadId=" + id2), "204");
  EXPECT_EQ(Answer("GET", "/mpu/other?uploadId=" + id2), "404 NoSuchUpload");
  EXPECT_TRUE(All(Get("/mpu?uploads"), "<UploadId>([^<]*)</UploadId>").empty());
  auto left = store_->List({.prefix = "", .start_after = "", .max_keys = 100});
  for (const ObjectInfo& o : left->objects) EXPECT_EQ(o.key.find(id2), std::string::npos) << o.key;
}

TEST_F(S3HandlerTest, AWholeObjectChecksumIsCheckedAtCompletionAndKept) {
  Put("/mpc", "");
  const std::string part1(5 << 20, 'x'), part2 = "tail";
  auto crc32 = [](std::string_view bytes) {
    std::optional<s3::PayloadChecksum> c = s3::PayloadChecksum::ForHeader("x-amz-checksum-crc32");
    c->Update(AsBytes(bytes));
    return c->FinishBase64();
  };
  // Uploads of the two parts, as a client that checksums the whole object makes them; the
  // body that completes each.
  auto upload = [&](const std::string& key) {
    auto created =
        Call("POST", "/mpc/" + key + "?uploads", "",
             {{"x-amz-checksum-algorithm", "CRC32"}, {"x-amz-checksum-type", "FULL_OBJECT"}});
    const std::string id = All(created->response_body(), "<UploadId>([^<]*)</UploadId>").at(0);
    std::string parts;
    for (const auto& [n, body] : {std::pair{1, part1}, std::pair{2, part2}}) {
      auto up = Call("PUT", "/mpc/" + key + "?partNumber=" + std::to_string(n) + "&uploadId=" + id,
                     body, {{"x-amz-checksum-crc32", crc32(body)}});
      EXPECT_EQ(up->ResponseHeader("x-amz-checksum-crc32"), crc32(body));
      parts += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" +
               *up->ResponseHeader("ETag") + "</ETag></Part>";
    }
    return std::pair("/mpc/" + key + "?uploadId=" + id,
                     "<CompleteMultipartUpload>" + parts + "</CompleteMultipartUpload>");
  };
  const Headers full = {{"x-amz-checksum-type", "FULL_OBJECT"}};
  auto with = [&](std::string value) {
    Headers h = full;
    h.emplace_back("x-amz-checksum-crc32", std::move(value));
    return h;
  };
  const auto [target, complete] = upload("obj");
  EXPECT_EQ(Answer("POST", target, complete, with(crc32(part1))), "400 BadDigest");
  EXPECT_EQ(Answer("GET", "/mpc/obj"), "404 NoSuchKey");  // nothing made; the upload is still there
  EXPECT_EQ(Answer("POST", target, complete, with(crc32(part1 + part2))), "200");
  auto got = Call("GET", "/mpc/obj", "", {{"x-amz-checksum-mode", "ENABLED"}});
  EXPECT_EQ(got->response_body(), part1 + part2);
  EXPECT_EQ(got->ResponseHeader("x-amz-checksum-crc32"), crc32(part1 + part2));
  // Any other (a composite checksum, of the parts' checksums) is not computed here: passed over.
  const auto [composite_target, composite_complete] = upload("composite");
  EXPECT_EQ(Answer("POST", composite_target, composite_complete,
                   {{"x-amz-checksum-crc32", "AAAAAA==-2"}, {"x-amz-checksum-type", "COMPOSITE"}}),
            "200");
  EXPECT_EQ(Call("HEAD", "/mpc/composite", "", {{"x-amz-checksum-mode", "ENABLED"}})
                ->ResponseHeader("x-amz-checksum-crc32"),
            std::nullopt);
  // So is one that does not say it is of the whole object.
  const auto [untyped_target, untyped_complete] = upload("untyped");
  EXPECT_EQ(
      Answer("POST", untyped_target, untyped_complete, {{"x-amz-checksum-crc32", "AAAAAA=="}}),
      "200");
}

TEST_F(S3HandlerTest, DeleteObjectsReportsEachKey) {
  Put("/del", "");
  for (const char* k : {"k1", "k2", "k3"}) Put(std::string("/del/") + k, "v");
  const std::string body =
      "<Delete><Object><Key>k1</Key></Object><Object><Key>absent</Key></Object>"
      "<Object><Key>k2</Key><VersionId>null</VersionId></Object>"
      "<Object><Key>k3</Key><VersionId>v7</VersionId></Object></Delete>";
  auto ex = Call("POST", "/del?delete", body);
  ASSERT_EQ(ex->status(), 200u);
  EXPECT_EQ(All(ex->response_body(), "<Deleted><Key>([^<]*)</Key>"),
            (std::vector<std::string>{"k1", "absent", "k2"}));
  EXPECT_EQ(All(ex->response_body(), "<Error><Key>([^<]*)</Key><Code>([^<]*)"),
            (std::vector<std::string>{"k3"}));
  EXPECT_EQ(Code(*ex), "NoSuchVersion");
  EXPECT_EQ(Answer("GET", "/del/k3"), "200");
  // Quiet: only the failures.
  auto quiet = Call("POST", "/del?delete",
                    "<Delete><Quiet>true</Quiet><Object><Key>k3</Key></Object></Delete>");
  EXPECT_EQ(quiet->response_body().find("<Deleted>"), std::string::npos);
  EXPECT_EQ(Answer("POST", "/del?delete", "<Delete><Object>"), "400 MalformedXML");
}

TEST_F(S3HandlerTest, CopyKeepsOrReplacesMetadata) {
  Put("/cpy", "");
  EXPECT_EQ(
      Answer("PUT", "/cpy/src", "bytes", {{"content-type", "text/x-a"}, {"x-amz-meta-k", "v"}}),
      "200");
  EXPECT_EQ(Answer("PUT", "/cpy/dst", "", {{"x-amz-copy-source", "/cpy/src"}}), "200");
  auto head = Call("HEAD", "/cpy/dst");
  EXPECT_EQ(head->ResponseHeader("Content-Type"), "text/x-a");
  EXPECT_EQ(head->ResponseHeader("x-amz-meta-k"), "v");
  EXPECT_EQ(Answer("PUT", "/cpy/dst", "",
                   {{"x-amz-copy-source", "/cpy/src"},
                    {"x-amz-metadata-directive", "REPLACE"},
                    {"content-type", "text/x-b"}}),
            "200");
  head = Call("HEAD", "/cpy/dst");
  EXPECT_EQ(head->ResponseHeader("Content-Type"), "text/x-b");
  EXPECT_EQ(head->ResponseHeader("x-amz-meta-k"), std::nullopt);
  EXPECT_EQ(Get("/cpy/dst"), "bytes");
  EXPECT_EQ(Answer("PUT", "/cpy/src", "", {{"x-amz-copy-source", "/cpy/src"}}),
            "400 InvalidRequest");
  EXPECT_EQ(Answer("PUT", "/cpy/x", "", {{"x-amz-copy-source", "/cpy/none"}}), "404 NoSuchKey");
  // A source names a version as GetObject does: each object's one version is "null".
  EXPECT_EQ(Answer("PUT", "/cpy/v", "", {{"x-amz-copy-source", "/cpy/src?versionId=null"}}), "200");
  EXPECT_EQ(Answer("PUT", "/cpy/w", "", {{"x-amz-copy-source", "/cpy/src?versionId=3HL4kqtJlcp"}}),
            "404 NoSuchVersion");
  EXPECT_EQ(Answer("GET", "/cpy/w"), "404 NoSuchKey");
  // A directive is COPY or REPLACE; any other (a typo of REPLACE) is refused, not taken as COPY.
  for (const char* directive : {"replace", "BOGUS", ""}) {
    EXPECT_EQ(Answer("PUT", "/cpy/typo", "",
                     {{"x-amz-copy-source", "/cpy/src"}, {"x-amz-metadata-directive", directive}}),
              "400 InvalidArgument")
        << directive;
  }
  EXPECT_EQ(Answer("GET", "/cpy/typo"), "404 NoSuchKey");
  EXPECT_EQ(Answer("PUT", "/cpy/typo", "",
                   {{"x-amz-copy-source", "/cpy/src"}, {"x-amz-metadata-directive", "COPY"}}),
            "200");
}

TEST_F(S3HandlerTest, TheChecksumAnObjectWasStoredWithIsAnsweredForTheWholeObject) {
  Put("/sum", "");
  const Headers mode = {{"x-amz-checksum-mode", "ENABLED"}};
  // The PUT's answer names it too, as S3's does (SDKs take a part's for the completion).
  EXPECT_EQ(Call("PUT", "/sum/h", "123456789", {{"x-amz-checksum-crc32", "y/Q5Jg=="}})
                ->ResponseHeader("x-amz-checksum-crc32"),
            "y/Q5Jg==");
  EXPECT_EQ(Answer("PUT", "/sum/t",
                   "9\r\n123456789\r\n0\r\nx-amz-checksum-crc64nvme:rosUhgp5mIg=\r\n\r\n",
                   {{"x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"},
                    {"content-encoding", "aws-chunked"},
                    {"x-amz-decoded-content-length", "9"},
                    {"x-amz-trailer", "x-amz-checksum-crc64nvme"}}),
            "200");
  EXPECT_EQ(Answer("PUT", "/sum/none", "123456789"), "200");
  EXPECT_EQ(Answer("PUT", "/sum/copy", "", {{"x-amz-copy-source", "/sum/h"}}), "200");
  const std::pair<const char*, const char*> stored[] = {{"/sum/h", "x-amz-checksum-crc32"},
                                                        {"/sum/t", "x-amz-checksum-crc64nvme"},
                                                        {"/sum/copy", "x-amz-checksum-crc32"}};
  for (const auto& [path, name] : stored) {
    for (const char* method : {"GET", "HEAD"}) {
      auto asked = Call(method, path, "", mode);
      EXPECT_EQ(asked->ResponseHeader(name),
                std::string(name).ends_with("crc32") ? "y/Q5Jg==" : "rosUhgp5mIg=")
          << method << " " << path;
      EXPECT_EQ(asked->ResponseHeader("x-amz-checksum-type"), "FULL_OBJECT");
      EXPECT_EQ(Call(method, path)->ResponseHeader(name), std::nullopt);  // not asked
    }
    // A range is not the object the checksum is of.
    Headers ranged = mode;
    ranged.emplace_back("range", "bytes=0-3");
    EXPECT_EQ(Call("GET", path, "", ranged)->ResponseHeader(name), std::nullopt) << path;
  }
  EXPECT_EQ(Call("GET", "/sum/none", "", mode)->ResponseHeader("x-amz-checksum-type"),
            std::nullopt);
  const std::string attributes =
      Call("GET", "/sum/t?attributes", "", {{"x-amz-object-attributes", "Checksum"}})
          ->response_body();
  EXPECT_NE(attributes.find("<Checksum><ChecksumCRC64NVME>rosUhgp5mIg=</ChecksumCRC64NVME>"
                            "<ChecksumType>FULL_OBJECT</ChecksumType></Checksum>"),
            std::string::npos)
      << attributes;
}

TEST_F(S3HandlerTest, ResponseParametersOverrideTheStoredHeadersOfOneResponse) {
  Put("/rsp", "");
  EXPECT_EQ(Answer("PUT", "/rsp/o", "bytes",
                   {{"content-type", "text/x-a"}, {"cache-control", "no-cache"}}),
            "200");
  for (const char* method : {"GET", "HEAD"}) {
    auto r = Call(method,
                  "/rsp/o?response-content-type=text%2Fplain&response-cache-control=max-age%3D60"
                  "&response-content-disposition=attachment%3B%20filename%3D%22o.bin%22"
                  "&response-expires=Thu%2C%2001%20Dec%202026%2016%3A00%3A00%20GMT");
    EXPECT_EQ(r->status(), 200u) << method;
    EXPECT_EQ(r->ResponseHeader("Content-Type"), "text/plain");
    EXPECT_EQ(r->ResponseHeader("cache-control"), "max-age=60");
    EXPECT_EQ(r->ResponseHeader("content-disposition"), "attachment; filename=\"o.bin\"");
    EXPECT_EQ(r->ResponseHeader("expires"), "Thu, 01 Dec 2026 16:00:00 GMT");
  }
  // Stored as they were: the overrides were for those responses only.
  auto plain = Call("HEAD", "/rsp/o");
  EXPECT_EQ(plain->ResponseHeader("Content-Type"), "text/x-a");
  EXPECT_EQ(plain->ResponseHeader("cache-control"), "no-cache");
  EXPECT_EQ(plain->ResponseHeader("content-disposition"), std::nullopt);
  // A value that would end the header line (a second header smuggled in) is refused.
  EXPECT_EQ(Answer("GET", "/rsp/o?response-content-type=text%2Fhtml%0D%0ASet-Cookie%3A%20s%3D1"),
            "400 InvalidArgument");
  EXPECT_EQ(Answer("GET", "/rsp/o?response-expires=%00"), "400 InvalidArgument");
  EXPECT_EQ(Get("/rsp/o?response-unknown=x"), "bytes");
}

TEST_F(S3HandlerTest, KvBucketsTakeOnlyChunkObjectsOfTheirLayout) {
  const ModelPreset tiny{"tiny", KvLayout{2, 1, 4, KvDtype::kFp8, 4}};
  EXPECT_EQ(Answer("PUT", "/kvb", "", {{"x-objectcache-kv-layout", ModelToJson(tiny)}}), "200");
  EXPECT_EQ(Answer("PUT", "/kvb/not-a-key", "bytes"), "400 InvalidChunkObject");
  const ChunkKey key = *ChunkKey::FromHex("0123456789abcdef0123456789abcdef");
  std::string kv(tiny.layout.ChunkKvBytes(), '\0');
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<char>(i * 7);
  const std::string object = *EncodeChunkObject(tiny.layout, key, AsBytes(kv));
  const std::string path = "/kvb/" + key.ToHex();
  EXPECT_EQ(Answer("PUT", path, object.substr(0, object.size() - 1)), "400 InvalidChunkObject");
  std::string damaged = object;
  damaged.back() ^= 1;
  EXPECT_EQ(Answer("PUT", path, damaged), "400 InvalidChunkObject");
  const ChunkKey other = *ChunkKey::FromHex("fedcba9876543210fedcba9876543210");
  EXPECT_EQ(Answer("PUT", "/kvb/" + other.ToHex(), object), "400 InvalidChunkObject");
  EXPECT_EQ(Answer("GET", path), "404 NoSuchKey");  // nothing of the above was stored
  Put(path, object);
  EXPECT_EQ(Get(path), object);
  EXPECT_EQ(Get("/kvb?kv-layout"), ModelToJson(tiny));
}

TEST_F(S3HandlerTest, BinaryLookupAnswersAsTheJsonOne) {
  const ModelPreset tiny{"tiny", KvLayout{2, 1, 4, KvDtype::kFp8, 4}};
  ASSERT_EQ(Answer("PUT", "/kvl", "", {{"x-objectcache-kv-layout", ModelToJson(tiny)}}), "200");
  std::vector<ChunkKey> keys;
  std::string json = "{\"keys\":[";
  for (int i = 0; i < 5; ++i) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%032x", 100 + i);
    keys.push_back(*ChunkKey::FromHex(hex));
    json += std::string(i ? "," : "") + "\"" + hex + "\"";
    if (i == 3) continue;  // a gap: the prefix is 3, four are present
    const std::string kv(tiny.layout.ChunkKvBytes(), static_cast<char>(i));
    Put("/kvl/" + keys.back().ToHex(), *EncodeChunkObject(tiny.layout, keys.back(), AsBytes(kv)));
  }
  json += "]}";
  const Headers binary{{"content-type", std::string(wire::kChunkKeysContentType)}};
  auto from_json = Call("POST", "/kvl?lookup", json);
  auto from_binary = Call("POST", "/kvl?lookup", wire::PutChunkKeys(keys), binary);
  EXPECT_EQ(from_json->status(), 200u);
  EXPECT_EQ(from_binary->response_body(), from_json->response_body());
  EXPECT_NE(from_json->response_body().find("\"present_prefix\":3"), std::string::npos)
      << from_json->response_body();
  // Not whole keys, or none: refused, as a malformed JSON body is.
  EXPECT_EQ(Answer("POST", "/kvl?lookup", wire::PutChunkKeys(keys).substr(0, 40), binary),
            "400 InvalidArgument");
  EXPECT_EQ(Answer("POST", "/kvl?lookup", "", binary), "400 InvalidArgument");
}

TEST_F(S3HandlerTest, GetsOfEverySmallSizeAreWhole) {
  // Sizes around the short-string buffer and its growth (a body is read into a string that is
  // sized, not zero-filled, first), and past the 64 KiB streaming buffer of these tests.
  Put("/sizes", "");
  for (size_t n : {0, 1, 15, 16, 17, 18, 29, 30, 31, 33, 100, 4096, 65536, 65537, 200000}) {
    std::string value(n, '\0');
    for (size_t i = 0; i < n; ++i) value[i] = static_cast<char>('a' + (i * 7 + n) % 26);
    Put("/sizes/k" + std::to_string(n), value);
    EXPECT_EQ(Get("/sizes/k" + std::to_string(n)), value) << n;
    if (n > 2) {
      auto ranged = Call("GET", "/sizes/k" + std::to_string(n), "", {{"range", "bytes=1-"}});
      EXPECT_EQ(ranged->response_body(), value.substr(1)) << n;
    }
  }
}

TEST_F(S3HandlerTest, ReadConditionsAndRanges) {
  Put("/rdx", "");
  Put("/rdx/k", "0123456789");
  auto head = Call("HEAD", "/rdx/k");
  const std::string etag = *head->ResponseHeader("ETag");
  EXPECT_EQ(Answer("GET", "/rdx/k", "", {{"if-none-match", etag}}), "304");
  EXPECT_EQ(Answer("GET", "/rdx/k", "", {{"if-match", "\"other\""}}), "412 PreconditionFailed");
  auto ranged = Call("GET", "/rdx/k", "", {{"range", "bytes=2-4"}});
  EXPECT_EQ(ranged->status(), 206u);
  EXPECT_EQ(ranged->response_body(), "234");
  EXPECT_EQ(ranged->ResponseHeader("Content-Range"), "bytes 2-4/10");
  EXPECT_EQ(Answer("GET", "/rdx/k", "", {{"range", "bytes=10-"}}), "416 InvalidRange");
}

TEST_F(S3HandlerTest, AWriterThatLosesTheRaceAfterItsCheckIs409) {
  // The If-Match check passes, then another client replaces the object before the body is in:
  // the commit must not overwrite the winner.
  Put("/race", "");
  Put("/race/k", "v1");
  const std::string etag = *Call("HEAD", "/race/k")->ResponseHeader("ETag");
  auto loser = Call("PUT", "/race/k", "loser", {{"if-match", etag}},
                    [this] { ASSERT_TRUE(store_->Put("race/k", AsBytes("winner")).ok()); });
  EXPECT_EQ(loser->status(), 409u);
  EXPECT_EQ(Code(*loser), "ConditionalRequestConflict");
  EXPECT_EQ(*ReadWholeObject(*store_, "race/k"), "winner");
}

TEST_F(S3HandlerTest, UnimplementedSubResourcesTouchNothing) {
  Put("/sub", "");
  Put("/sub/k", "v");
  EXPECT_EQ(Answer("PUT", "/sub?policy", "{}"), "501 NotImplemented");
  EXPECT_EQ(Answer("POST", "/sub", "a browser form"), "405 MethodNotAllowed");
  // A 405 names the methods the resource takes (RFC 9110 15.5.6).
  EXPECT_EQ(Call("POST", "/sub", "a browser form")->ResponseHeader("Allow"),
            "GET, HEAD, PUT, DELETE");
  EXPECT_EQ(Call("PATCH", "/sub/k")->ResponseHeader("Allow"), "GET, HEAD, PUT, DELETE");
  EXPECT_EQ(Call("DELETE", "/")->ResponseHeader("Allow"), "GET");
  EXPECT_EQ(Answer("DELETE", "/sub/k?tagging"), "501 NotImplemented");
  EXPECT_EQ(Answer("PUT", "/sub/k?retention", "<Retention/>"), "501 NotImplemented");
  EXPECT_EQ(Get("/sub/k"), "v");
}

}  // namespace
}  // namespace objectcache::server

namespace objectcache::server {
namespace {

// The local store keeps each object in a file: with an exchange that sends files, GETs and
// layerwise retrievals send file ranges (sendfile on a connection) instead of copies. The bytes
// must be the same either way, to the last one.
class S3HandlerFilesTest : public S3HandlerTest {
 protected:
  S3HandlerFilesTest() : S3HandlerFilesTest(MakeScratchDir()) {}
  explicit S3HandlerFilesTest(std::string dir)
      : S3HandlerTest(OpenLocal(dir)), scratch_(std::move(dir)) {}
  ~S3HandlerFilesTest() override { RemoveTree(scratch_); }

  static std::unique_ptr<Store> OpenLocal(const std::string& dir) {
    Result<std::unique_ptr<Store>> store = OpenLocalStore({.root = dir});
    EXPECT_TRUE(store.has_value()) << store.error().ToString();
    return std::move(*store);
  }

  // The response to `method target body`, sent copied and then from files; `file_bytes`: how
  // much of the second went through WriteBodyFiles.
  std::pair<std::string, std::string> BothWays(const std::string& method, const std::string& target,
                                               const std::string& body, Headers headers = {},
                                               uint64_t* file_bytes = nullptr) {
    sends_files_ = false;
    auto copied = Call(method, target, body, headers);
    sends_files_ = true;
    auto from_files = Call(method, target, body, headers);
    sends_files_ = false;
    EXPECT_EQ(copied->status(), from_files->status());
    if (file_bytes) *file_bytes = from_files->file_bytes_sent();
    return {copied->response_body(), from_files->response_body()};
  }

  const std::string scratch_;
};

TEST_F(S3HandlerFilesTest, LargeGetsAreTheSameBytesFromFiles) {
  Put("/files", "");
  std::string value(300 << 10, '\0');  // several io_buffer pieces
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 131 + (i >> 9));
  Put("/files/big", value);
  uint64_t file_bytes = 0;
  auto [copied, from_files] = BothWays("GET", "/files/big", "", {}, &file_bytes);
  EXPECT_EQ(copied, value);
  EXPECT_EQ(from_files, value);
  EXPECT_EQ(file_bytes, value.size());
  auto [r1, r2] = BothWays("GET", "/files/big", "", {{"range", "bytes=1000-200000"}}, &file_bytes);
  EXPECT_EQ(r1, value.substr(1000, 199001));
  EXPECT_EQ(r2, r1);
  EXPECT_EQ(file_bytes, r1.size());
}

// Objects and ranges of 16 KiB or more go from their files (as nginx sends static files);
// smaller ones through memory, where one write of header and body costs less than two calls.
TEST_F(S3HandlerFilesTest, SmallGetsFromFilesDownTo16KiB) {
  Put("/files", "");
  for (size_t size : {size_t{1}, size_t{(16 << 10) - 1}, size_t{16 << 10}, size_t{64 << 10}}) {
    std::string value(size, '\0');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 7 + size);
    Put("/files/o" + std::to_string(size), value);
    uint64_t file_bytes = 0;
    auto [copied, from_files] =
        BothWays("GET", "/files/o" + std::to_string(size), "", {}, &file_bytes);
    EXPECT_EQ(copied, value) << size;
    EXPECT_EQ(from_files, value) << size;
    EXPECT_EQ(file_bytes, size >= (16 << 10) ? size : 0) << size;
  }
  uint64_t file_bytes = 0;
  auto [r1, r2] = BothWays("GET", "/files/o65536", "", {{"range", "bytes=100-20099"}}, &file_bytes);
  EXPECT_EQ(r1.size(), 20000u);
  EXPECT_EQ(r2, r1);
  EXPECT_EQ(file_bytes, 20000u);
  BothWays("GET", "/files/o65536", "", {{"range", "bytes=100-199"}}, &file_bytes);
  EXPECT_EQ(file_bytes, 0u);
}

TEST_F(S3HandlerFilesTest, LayerwiseResponsesAreTheSameBytesFromFiles) {
  const ModelPreset tiny{"tiny", KvLayout{4, 2, 8, KvDtype::kBf16, 16}};
  ASSERT_EQ(Answer("PUT", "/lwfiles", "", {{"x-objectcache-kv-layout", ModelToJson(tiny)}}), "200");
  std::vector<std::string> keys;
  for (int c = 0; c < 5; ++c) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%032x", c + 1);
    const ChunkKey key = *ChunkKey::FromHex(hex);
    std::string kv(tiny.layout.ChunkKvBytes(), '\0');
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<char>(i * 7 + c * 13);
    if (c < 4) Put("/lwfiles/" + key.ToHex(), *EncodeChunkObject(tiny.layout, key, AsBytes(kv)));
    keys.push_back("\"" + key.ToHex() + "\"");
  }
  // Four hits, then a miss; all layers and a middle range; both wire versions (v1 is always
  // copied: its server verifies every slice).
  for (const char* layers : {"[0,4]", "[1,3]"}) {
    for (int version : {1, 2}) {
      std::string body =
          "{\"version\":" + std::to_string(version) + ",\"layers\":" + layers + ",\"keys\":[";
      for (size_t i = 0; i < keys.size(); ++i) body += (i ? "," : "") + keys[i];
      body += "]}";
      uint64_t file_bytes = 0;
      auto [copied, from_files] = BothWays("POST", "/lwfiles?layerwise", body, {}, &file_bytes);
      const uint64_t payload = (layers[1] == '0' ? 4 : 2) * 4 * tiny.layout.LayerSliceBytes();
      EXPECT_GT(copied.size(), payload) << layers << " v" << version;
      EXPECT_EQ(copied, from_files) << layers << " v" << version;
      EXPECT_EQ(file_bytes, version == 2 ? payload : 0) << layers << " v" << version;
    }
  }
}

// A response from files whose client goes away after the first layer: the read-ahead of the
// other layers, started on the store pool once that layer is sent, shares the open files with
// the response and may outlive it (under ASan, scripts/sanitize, a freed reader is an error). The
// handler then serves the request whole.
TEST_F(S3HandlerFilesTest, AResponseEndingAfterItsFirstLayerLeavesItsReadAheadTheFiles) {
  const ModelPreset tiny{"tiny", KvLayout{4, 2, 8, KvDtype::kBf16, 16}};
  const uint64_t slice = tiny.layout.LayerSliceBytes();  // 1 KiB
  ASSERT_EQ(Answer("PUT", "/early", "", {{"x-objectcache-kv-layout", ModelToJson(tiny)}}), "200");
  std::string body = "{\"version\":2,\"layers\":[0,4],\"keys\":[";
  for (int c = 0; c < 8; ++c) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%032x", c + 1);
    const ChunkKey key = *ChunkKey::FromHex(hex);
    const std::string kv(tiny.layout.ChunkKvBytes(), static_cast<char>(c * 3 + 1));
    Put("/early/" + key.ToHex(), *EncodeChunkObject(tiny.layout, key, AsBytes(kv)));
    body += std::string(c ? "," : "") + "\"" + key.ToHex() + "\"";
  }
  body += "]}";
  auto cut = std::make_unique<MemoryHttpExchange>("POST", "/early?layerwise",
                                                  Headers{{"host", "127.0.0.1"}}, body, 7000);
  cut->SetSendsFiles(true);
  cut->FailWritesAfter(8 * slice + 1024);  // the first layer and its framing, not the second
  RunExchange(io_, handler_, *cut);
  EXPECT_EQ(cut->status(), 200u);
  EXPECT_FALSE(cut->complete());
  EXPECT_EQ(cut->file_bytes_sent(), 8 * slice);
  sends_files_ = true;
  auto whole = Call("POST", "/early?layerwise", body);
  sends_files_ = false;
  EXPECT_EQ(whole->file_bytes_sent(), 4 * 8 * slice);
}

}  // namespace
}  // namespace objectcache::server
