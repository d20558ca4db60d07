#include "wire/layerwise_request.h"

#include <gtest/gtest.h>

#include <string>

#include "wire/layerwise_wire.h"

namespace objectcache::wire {
namespace {

ChunkKey Key(uint8_t b) {
  ChunkKey::Bytes bytes{};
  bytes.fill(b);
  return ChunkKey(bytes);
}

TEST(LayerwiseRequestTest, WhatIsEncodedDecodesToTheSameRequest) {
  Result<ModelPreset> llama = FindModelPreset("llama-3.1-8b");
  ASSERT_TRUE(llama.ok());
  const LayerwiseRequestBody sent{.version = kLayerwiseV2,
                                  .keys = {Key(1), Key(2), Key(0xff)},
                                  .first = 3,
                                  .last = 32,
                                  .model = *llama,
                                  .compute_seconds_per_layer = 0.0125};
  Result<LayerwiseRequestBody> got = DecodeLayerwiseRequest(EncodeLayerwiseRequest(sent), 8);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->version, kLayerwiseV2);
  EXPECT_EQ(got->keys, sent.keys);
  EXPECT_EQ(got->first, 3u);
  EXPECT_EQ(got->last, 32u);
  ASSERT_TRUE(got->model.has_value());
  EXPECT_EQ(got->model->name, "llama-3.1-8b");
  EXPECT_EQ(got->model->layout, llama->layout);
  EXPECT_DOUBLE_EQ(got->compute_seconds_per_layer, 0.0125);

  // Without a layout or a compute time, neither is sent nor read back.
  const std::string bare = EncodeLayerwiseRequest({.keys = {Key(7)}, .first = 0, .last = 1});
  EXPECT_EQ(bare.find("layout"), std::string::npos);
  EXPECT_EQ(bare.find("compute_seconds_per_layer"), std::string::npos);
  got = DecodeLayerwiseRequest(bare, 8);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->version, kLayerwiseV1);
  EXPECT_FALSE(got->model.has_value());
  EXPECT_EQ(got->compute_seconds_per_layer, 0);
}

TEST(LayerwiseRequestTest, APresetNameIsALayout) {
  Result<LayerwiseRequestBody> got = DecodeLayerwiseRequest(
      R"({"version": 1, "keys": ["00112233445566778899aabbccddeeff"], "layers": [0, 2],
          "layout": "granite-3.3-8b"})",
      8);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->model->name, "granite-3.3-8b");
}

TEST(LayerwiseRequestTest, EveryMalformedFieldIsRefusedByName) {
  const std::string key = R"("00112233445566778899aabbccddeeff")";
  const struct {
    std::string body, names;
  } cases[] = {
      {"[]", "JSON object"},
      {"not json", "JSON object"},
      {R"({"keys": [)" + key + R"(], "layers": [0, 1]})", "version"},
      {R"({"version": 3, "keys": [)" + key + R"(], "layers": [0, 1]})", "version"},
      {R"({"version": "1", "keys": [)" + key + R"(], "layers": [0, 1]})", "version"},
      {R"({"version": 1, "keys": [], "layers": [0, 1]})", "keys"},
      {R"({"version": 1, "keys": [)" + key + "," + key + "," + key + R"(], "layers": [0, 1]})",
       "keys"},
      {R"({"version": 1, "keys": ["0011"], "layers": [0, 1]})", "keys"},
      {R"({"version": 1, "keys": [17], "layers": [0, 1]})", "keys"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [0]})", "layers"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [-1, 1]})", "layers"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [0, 4294967296]})", "layers"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [0, 18446744073709551615]})",
       "layers"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [0, 1], "layout": "no-such"})",
       "layout"},
      {R"({"version": 1, "keys": [)" + key + R"(], "layers": [0, 1], "layout": {"layers": 0}})",
       "layout"},
      {R"({"version": 1, "keys": [)" + key +
           R"(], "layers": [0, 1], "compute_seconds_per_layer": 0})",
       "compute_seconds_per_layer"},
      {R"({"version": 1, "keys": [)" + key +
           R"(], "layers": [0, 1], "compute_seconds_per_layer": 1e300})",
       "compute_seconds_per_layer"},
  };
  for (const auto& c : cases) {
    Result<LayerwiseRequestBody> got = DecodeLayerwiseRequest(c.body, 2);
    ASSERT_FALSE(got.ok()) << c.body;
    EXPECT_EQ(got.error().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(got.error().message().find(c.names), std::string::npos)
        << c.body << ": " << got.error().message();
  }
}

TEST(LayerwiseRequestTest, AHugeBodyIsRefusedBeforeATreeIsBuilt) {
  std::string many = R"({"version": 1, "keys": [)";
  for (int i = 0; i < 100000; ++i) many += "1,";
  many += R"(1], "layers": [0, 1]})";
  Result<LayerwiseRequestBody> got = DecodeLayerwiseRequest(many, 16);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message().find("JSON object"), std::string::npos);
}

}  // namespace
}  // namespace objectcache::wire
