// Gateways (`objectcache serve --store rados://...`) over the Ceph cluster of a ctest fixture,
// and a prefix of random KV stored through them and checked byte for byte when it comes back:
// what the Ceph tests share (test/ceph_gateway_test.cc, test/ceph_failures_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/seeded_data.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
#include "s3/s3_connection.h"
#include "store/scratch_dir.h"
#include "test/server_process.h"

namespace objectcache::test_support {

class CephGatewayFixture : public ::testing::Test {
 protected:
  // The cluster's directory is in $`env` (without it the test is skipped). Each test's objects
  // go in a RADOS namespace of its own, NS_PREFIX-PID-TEST; its prefixes are of `model`.
  CephGatewayFixture(const char* env, std::string ns_prefix, ModelPreset model)
      : model_(std::move(model)), env_(env), ns_prefix_(std::move(ns_prefix)) {}

  void SetUp() override {
    const char* cluster = std::getenv(env_);
    if (!cluster) GTEST_SKIP() << env_ << " is not set: run under ctest";
    cluster_ = cluster;
    dir_ = MakeScratchDir();
    ns_ = ns_prefix_ + "-" + std::to_string(getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    gateways_.clear();
    if (!dir_.empty()) RemoveTree(dir_);
  }

  // This test's namespace of `pool` in the cluster whose files are in `cluster`; a read that
  // the cluster does not answer gives up after `timeout_s` seconds.
  std::string RadosUri(const std::string& cluster, const std::string& pool = "objectcache",
                       int timeout_s = 30) const {
    return "rados://" + pool + "?conf=" + cluster + "/ceph.conf&namespace=" + ns_ +
           "&timeout=" + std::to_string(timeout_s);
  }

  // Starts a gateway over `store_uri`, with `flags` after its --store; its endpoint.
  std::string StartGateway(const std::string& store_uri, std::vector<std::string> flags = {}) {
    const std::string name = dir_ + "/gw" + std::to_string(gateways_.size());
    flags.insert(flags.begin(), {"--store", store_uri});
    gateways_.push_back(std::make_unique<testing::ServerProcess>(name, 0, flags));
    EXPECT_GT(gateways_.back()->port(), 0) << "gateway did not start (" << name << ")";
    return "http://" + gateways_.back()->endpoint();
  }

  // PUT /BUCKET, a KV bucket of `layout` (a preset name or a layout's JSON), or with an empty
  // one a bucket for any S3 object; 200, or with `exists_ok` also 409 (created before).
  void CreateBucket(const std::string& endpoint, const std::string& bucket,
                    const std::string& layout, bool exists_ok = false) {
    s3::S3Connection conn(*s3::S3Endpoint::Parse(endpoint), s3::S3Credentials{});
    Result<s3::S3Response> res = testing::PutBucket(conn, bucket, layout);
    ASSERT_TRUE(res.has_value()) << res.error().ToString();
    ASSERT_TRUE(res->status == 200 || (exists_ok && res->status == 409)) << res->error_body;
  }

  // `chunks` chunks of a prompt drawn from `seed`, with random KV, stored through `writer`
  // (flushed every `flush_every` chunks and at the end): keys_ and kv_.
  void StorePrefix(Client* writer, size_t chunks, uint64_t seed, size_t flush_every) {
    std::mt19937_64 rng(seed);
    keys_ = KeyNamespace(model_.name, model_.layout)
                .KeysForTokens(RandomTokens(rng, model_.layout.tokens_per_chunk * chunks));
    kv_.clear();
    for (size_t i = 0; i < keys_.size(); ++i) {
      kv_.push_back(RandomBytes(rng, model_.layout.ChunkKvBytes()));
      writer->StoreAsync(keys_[i], *EncodeChunkObject(model_.layout, keys_[i], AsBytes(kv_[i])));
      if (i % flush_every == flush_every - 1) writer->Flush();
    }
    writer->Flush();
    ASSERT_EQ(writer->Stats().stored, keys_.size());
  }

  // Regions for every layer of keys_, and a request of model_ that retrieves into them.
  LayerwiseRequest RequestInto(std::vector<std::string>* regions) const {
    const uint32_t layers = model_.layout.num_layers;
    regions->assign(layers, std::string(keys_.size() * model_.layout.LayerSliceBytes(), '\0'));
    LayerwiseRequest req{.model = model_, .keys = keys_, .layers = {0, layers}};
    for (std::string& r : *regions) req.regions.push_back(AsWritableBytes(r));
    return req;
  }

  // OK only if the retrieval into `regions` (RequestInto) hit every key and every byte is
  // what was stored; DataLoss naming the first wrong layer and chunk.
  Status CheckRetrieved(LayerwiseRetrieval& retrieval,
                        const std::vector<std::string>& regions) const {
    OC_ASSIGN_OR_RETURN(uint32_t hits, retrieval.Hits());
    if (hits != keys_.size()) return DataLossError("hits " + std::to_string(hits));
    const uint64_t slice = model_.layout.LayerSliceBytes();
    for (uint32_t l = 0; l < regions.size(); ++l) {
      for (size_t c = 0; c < keys_.size(); ++c) {
        if (regions[l].compare(c * slice, slice, kv_[c], l * slice, slice) != 0) {
          return DataLossError("wrong bytes at layer " + std::to_string(l) + " chunk " +
                               std::to_string(c));
        }
      }
    }
    return Status();
  }

  const ModelPreset model_;
  std::string cluster_, dir_, ns_;
  std::vector<std::unique_ptr<testing::ServerProcess>> gateways_;
  std::vector<ChunkKey> keys_;
  std::vector<std::string> kv_;

 private:
  const char* const env_;
  const std::string ns_prefix_;
};

}  // namespace objectcache::test_support
