#include "server/s3_routes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace objectcache::server {
namespace {

s3::S3Result<S3Route> Route(const std::string& method, const std::string& target,
                            std::vector<std::pair<std::string, std::string>> headers = {}) {
  auto r = s3::ParseS3Request(method, target, std::move(headers), {});
  EXPECT_TRUE(r.has_value()) << target;
  return RouteS3Request(*r);
}

// The sub-resources in the row of docs/s3-api.md's sub-resource table that ends "not
// implemented": each is a name in backquotes.
std::vector<std::string> NotImplementedInDocs() {
  std::ifstream docs(OBJECTCACHE_SOURCE_DIR "/docs/s3-api.md");
  EXPECT_TRUE(docs) << "docs/s3-api.md";
  std::vector<std::string> names;
  for (std::string line; std::getline(docs, line);) {
    if (!line.starts_with("| `") || !line.ends_with("| not implemented |")) continue;
    const std::string first_cell = line.substr(0, line.find(" | "));
    for (size_t open = first_cell.find('`'); open != std::string::npos;) {
      const size_t close = first_cell.find('`', open + 1);
      if (close == std::string::npos) break;
      names.push_back(first_cell.substr(open + 1, close - open - 1));
      open = first_cell.find('`', close + 1);
    }
  }
  return names;
}

TEST(S3RoutesTest, BaseOperationsByMethodAndScope) {
  EXPECT_EQ(*Route("GET", "/"), S3Route::kListBuckets);
  EXPECT_EQ(*Route("PUT", "/bkt"), S3Route::kCreateBucket);
  EXPECT_EQ(*Route("GET", "/bkt?list-type=2&prefix=a"), S3Route::kListObjectsV2);
  EXPECT_EQ(*Route("GET", "/bkt?prefix=a&x-id=ListObjects"), S3Route::kListObjects);
  EXPECT_EQ(*Route("PUT", "/bkt/k"), S3Route::kPutObject);
  EXPECT_EQ(*Route("PUT", "/bkt/k", {{"x-amz-copy-source", "/a/b"}}), S3Route::kCopyObject);
  EXPECT_EQ(*Route("GET", "/bkt/k?versionId=null"), S3Route::kGetObject);
  EXPECT_EQ(*Route("PUT", "/bkt/k?partNumber=2&uploadId=u"), S3Route::kUploadPart);
  EXPECT_EQ(Route("POST", "/bkt/k").error().code, "MethodNotAllowed");
  EXPECT_EQ(Route("DELETE", "/").error().code, "MethodNotAllowed");
}

TEST(S3RoutesTest, SubResourcesNeverFallThroughToTheBaseOperation) {
  // The reported cases: ?versions was a plain listing, PUT ?acl was CreateBucket, GET
  // ?attributes returned the object's bytes.
  EXPECT_EQ(*Route("GET", "/bkt?versions"), S3Route::kListObjectVersions);
  EXPECT_EQ(*Route("PUT", "/bkt?acl"), S3Route::kPutBucketAcl);
  EXPECT_EQ(*Route("GET", "/bkt/k?attributes"), S3Route::kGetObjectAttributes);
  EXPECT_EQ(Route("PUT", "/bkt/k?attributes").error().code, "NotImplemented");
  EXPECT_EQ(Route("GET", "/bkt?attributes").error().code, "NotImplemented");
  EXPECT_EQ(*Route("GET", "/bkt?versioning"), S3Route::kGetBucketVersioning);
  EXPECT_EQ(*Route("GET", "/bkt/k?acl"), S3Route::kGetObjectAcl);
  EXPECT_EQ(*Route("POST", "/bkt/k?uploads"), S3Route::kCreateMultipartUpload);
  for (const char* sub : {"cors", "lifecycle", "policy", "tagging", "website", "logging",
                          "encryption", "replication", "notification", "object-lock",
                          "publicAccessBlock", "ownershipControls", "requestPayment"}) {
    for (const char* method : {"GET", "PUT", "DELETE"}) {
      auto r = Route(method, std::string("/bkt?") + sub);
      ASSERT_FALSE(r.has_value()) << method << " " << sub;
      EXPECT_EQ(r.error().code, "NotImplemented") << method << " " << sub;
      EXPECT_TRUE(IsSubResource(sub));
    }
  }
  for (const char* sub : {"tagging", "retention", "legal-hold", "restore", "select", "torrent"}) {
    EXPECT_EQ(Route("GET", std::string("/bkt/k?") + sub).error().code, "NotImplemented") << sub;
    EXPECT_EQ(Route("POST", std::string("/bkt/k?") + sub).error().code, "NotImplemented") << sub;
  }
  // Every sub-resource docs/s3-api.md's table names as not implemented, on every method and both
  // scopes: the table is the list, so the two cannot drift apart.
  const std::vector<std::string> not_implemented = NotImplementedInDocs();
  EXPECT_GE(not_implemented.size(), 20u);
  for (const std::string& sub : not_implemented) {
    for (const char* method : {"GET", "PUT", "POST", "DELETE", "HEAD"}) {
      for (const char* target : {"/bkt?", "/bkt/k?"}) {
        auto r = Route(method, target + sub);
        ASSERT_FALSE(r.has_value()) << method << " " << target << sub;
        EXPECT_EQ(r.error().code, "NotImplemented") << method << " " << target << sub;
      }
    }
  }
  // A sub-resource with a method it is not implemented for is not the base operation either.
  EXPECT_EQ(Route("DELETE", "/bkt?versioning").error().code, "NotImplemented");
  EXPECT_EQ(Route("POST", "/bkt?acl").error().code, "NotImplemented");
  // GetObject of one part (partNumber without uploadId).
  EXPECT_EQ(Route("GET", "/bkt/k?partNumber=1").error().code, "NotImplemented");
  EXPECT_EQ(Route("POST", "/bkt?delete&lookup").error().code, "InvalidRequest");
}

TEST(S3RoutesTest, HeadersAskingForWhatNoObjectGetsAreNotImplemented) {
  // Taken silently, the writer would believe the object public, encrypted, locked or tagged.
  const std::vector<std::pair<std::string, std::string>> unkept[] = {
      {{"x-amz-acl", "public-read"}},
      {{"x-amz-grant-read", "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\""}},
      {{"x-amz-server-side-encryption", "aws:kms"}},
      {{"x-amz-server-side-encryption", "AES256"}},
      {{"x-amz-server-side-encryption-customer-algorithm", "AES256"}},
      {{"x-amz-copy-source", "/a/b"},
       {"x-amz-copy-source-server-side-encryption-customer-key", "k"}},
      {{"x-amz-object-lock-mode", "GOVERNANCE"}},
      {{"x-amz-bucket-object-lock-enabled", "true"}},
      {{"x-amz-tagging", "a=b"}},
  };
  for (const auto& headers : unkept) {
    for (const char* target : {"/bkt", "/bkt/k", "/bkt/k?uploads"}) {
      const char* method = std::string_view(target).ends_with("uploads") ? "POST" : "PUT";
      auto r = Route(method, target, headers);
      ASSERT_FALSE(r.has_value()) << headers[0].first << " " << target;
      EXPECT_EQ(r.error().code, "NotImplemented") << headers[0].first;
    }
  }
  EXPECT_EQ(*Route("PUT", "/bkt/k", {{"x-amz-acl", "private"}}), S3Route::kPutObject);
  EXPECT_EQ(*Route("PUT", "/bkt/k", {{"x-amz-acl", "bucket-owner-full-control"}}),
            S3Route::kPutObject);
  EXPECT_EQ(*Route("PUT", "/bkt", {{"x-amz-bucket-object-lock-enabled", "false"}}),
            S3Route::kCreateBucket);
  EXPECT_EQ(*Route("PUT", "/bkt/k?acl", {{"x-amz-acl", "private"}}), S3Route::kPutObjectAcl);
  EXPECT_EQ(*Route("PUT", "/bkt/k", {{"x-amz-storage-class", "STANDARD_IA"}}), S3Route::kPutObject);
}

}  // namespace
}  // namespace objectcache::server
