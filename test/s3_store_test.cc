// The s3:// store backend passes the store conformance suite against a real `objectcache
// serve` (a fresh bucket per test, so a reopen sees the same objects).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "objectcache/store_registry.h"
#include "s3/s3_connection.h"
#include "store/s3/s3_store.h"
#include "store/store_conformance.h"
#include "test/server_process.h"

namespace objectcache {
namespace {

namespace fs = std::filesystem;

// One server for the whole binary, ended by its PID at exit.
class ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = MakeScratchDir();
    server_ = std::make_unique<testing::ServerProcess>(dir_);
    ASSERT_GT(server_->port(), 0);
    endpoint = server_->endpoint();
  }
  void TearDown() override {
    server_.reset();
    RemoveTree(dir_);
  }
  static inline std::string endpoint;

 private:
  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};

Result<std::unique_ptr<Store>> OpenBucketFor(const std::string& scratch_dir) {
  // One bucket per scratch directory: the same directory reopens the same bucket.
  std::string bucket = "conf-" + std::to_string(std::hash<std::string>()(scratch_dir) % 1000000000);
  s3::S3Connection conn(*s3::S3Endpoint::Parse(ServerEnvironment::endpoint), {});
  auto r = conn.Send("PUT", "/" + bucket, {}, "", [](auto) { return Status(); });
  if (!r.has_value()) return r.error();
  return OpenS3Store("s3://" + ServerEnvironment::endpoint + "/" + bucket);
}

INSTANTIATE_TEST_SUITE_P(S3, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"s3", OpenBucketFor}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(S3StoreTest, RegisteredSchemeOpensAndBadUrisFail) {
  RegisterS3Store();
  EXPECT_EQ(OpenStore("s3://" + ServerEnvironment::endpoint).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStore("s3://" + ServerEnvironment::endpoint + "/no-such-bucket").status().code(),
            StatusCode::kNotFound);
  s3::S3Connection conn(*s3::S3Endpoint::Parse(ServerEnvironment::endpoint), {});
  ASSERT_TRUE(conn.Send("PUT", "/registered", {}, "", [](auto) { return Status(); }).has_value());
  Result<std::unique_ptr<Store>> s =
      OpenStore("s3://" + ServerEnvironment::endpoint + "/registered");
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_FALSE((*s)->Capabilities().tracks_usage);
}

}  // namespace
}  // namespace objectcache

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new objectcache::ServerEnvironment);
  return RUN_ALL_TESTS();
}
