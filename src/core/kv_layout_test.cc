#include "objectcache/kv_layout.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace objectcache {
namespace {

TEST(KvLayoutTest, PresetsMatchArchitectureTable) {
  struct Want {
    const char* name;
    uint64_t token_bytes;
    uint64_t slice_bytes;
  };
  for (const Want& w :
       {Want{"llama-3.1-8b", 128 << 10, 64 << 10}, Want{"granite-3.3-8b", 160 << 10, 64 << 10},
        Want{"deepseek-r1-distill-qwen-7b", 56 << 10, 32 << 10},
        Want{"llama-3.1-70b", 320 << 10, 64 << 10}}) {
    Result<ModelPreset> p = FindModelPreset(w.name);
    ASSERT_TRUE(p.has_value()) << w.name;
    EXPECT_EQ(p->layout.TokenBytes(), w.token_bytes) << w.name;
    EXPECT_EQ(p->layout.LayerSliceBytes(), w.slice_bytes) << w.name;
    EXPECT_TRUE(p->layout.Validate().ok());
  }
  EXPECT_EQ(FindModelPreset("llama-3.1-8b")->layout.ChunkKvBytes(), 2u << 20);
}

TEST(KvLayoutTest, FingerprintIsPinned) {
  // Golden values, computed independently by scripts/keys_reference.py (docs/keys.md).
  EXPECT_EQ(FindModelPreset("llama-3.1-8b")->layout.Fingerprint(), 0x9e8349eb5bbe3ab6u);
  EXPECT_EQ(FindModelPreset("deepseek-r1-distill-qwen-7b")->layout.Fingerprint(),
            0x2c855935a8b744e5u);
  KvLayout tiny{2, 1, 4, KvDtype::kFp8, 4};
  EXPECT_EQ(tiny.Fingerprint(), 0x19e9e77551e0fa4du);
}

TEST(KvLayoutTest, FingerprintChangesWithEveryField) {
  KvLayout base = FindModelPreset("llama-3.1-8b")->layout;
  KvLayout a = base, b = base, c = base, d = base, e = base, f = base;
  a.num_layers = 33;
  b.num_kv_heads = 4;
  c.head_dim = 64;
  d.dtype = KvDtype::kFp16;
  e.tokens_per_chunk = 32;
  f.kind = KvKind::kLatent;
  for (const KvLayout& other : {a, b, c, d, e, f}) {
    EXPECT_NE(other.Fingerprint(), base.Fingerprint()) << other.ToString();
  }
}

TEST(KvLayoutTest, UnknownPresetIsNotFoundAndListsNames) {
  Result<ModelPreset> p = FindModelPreset("gpt-5");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code(), StatusCode::kNotFound);
  EXPECT_NE(p.error().message().find("llama-3.1-8b"), std::string::npos);
}

TEST(KvLayoutTest, JsonRoundTrips) {
  ModelPreset m{"my-model", {12, 2, 64, KvDtype::kFp32, 8}};
  Result<ModelPreset> back = ParseModelJson(ModelToJson(m));
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->name, "my-model");
  EXPECT_EQ(back->layout, m.layout);
}

TEST(KvLayoutTest, LatentJsonRoundTripsAndHalvesTheSlice) {
  Result<ModelPreset> m = ParseModelJson(
      R"({"name": "deepseek-v3", "layers": 61, "kv_heads": 1, "head_dim": 576,
          "dtype": "bf16", "kv": "latent"})");
  ASSERT_TRUE(m.has_value()) << m.error().ToString();
  EXPECT_EQ(m->layout.kind, KvKind::kLatent);
  EXPECT_EQ(m->layout.LayerSliceBytes(), 16u * 576 * 2);
  EXPECT_EQ(ParseModelJson(ModelToJson(*m))->layout, m->layout);
  EXPECT_FALSE(ParseModelJson(R"({"layers": 1, "kv_heads": 1, "head_dim": 8, "dtype": "bf16",
                                  "kv": "both"})")
                   .has_value());
}

TEST(KvLayoutTest, JsonDefaultsTokensPerChunkTo16) {
  Result<ModelPreset> m =
      ParseModelJson(R"({"layers": 4, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->layout.tokens_per_chunk, 16u);
  EXPECT_EQ(m->name, "custom");
}

TEST(KvLayoutTest, BadJsonIsInvalidArgument) {
  for (const char* text : {"", "[]", "{", R"({"layers": 4})",
                           R"({"layers": -1, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})",
                           R"({"layers": 0, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})",
                           R"({"layers": 4, "kv_heads": 2, "head_dim": 64, "dtype": "int4"})",
                           R"({"layers": 4, "kv_heads": 2, "head_dim": 64, "dtype": 3})",
                           R"({"layers": 999, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})",
                           R"({"layers": 4.5, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})"}) {
    Result<ModelPreset> m = ParseModelJson(text);
    ASSERT_FALSE(m.has_value()) << text;
    EXPECT_EQ(m.error().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(KvLayoutTest, LayoutFilesAreReadUpToTheirBound) {
  std::string dir = ::testing::TempDir() + "/kv-layout-XXXXXX";  // this test's own
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string json = R"({"layers": 4, "kv_heads": 2, "head_dim": 64, "dtype": "fp16"})";
  const std::string fits = dir + "/fits.json";
  std::ofstream(fits) << json << std::string(kMaxLayoutFileBytes - json.size(), ' ');
  Result<ModelPreset> m = ResolveModel(fits);
  ASSERT_TRUE(m.has_value()) << m.error().ToString();
  EXPECT_EQ(m->layout.num_layers, 4u);

  const std::string over = dir + "/over.json";
  std::ofstream(over) << json << std::string(kMaxLayoutFileBytes - json.size() + 1, ' ');
  for (const std::string& path : {over, std::string("/dev/zero")}) {
    m = ResolveModel(path);
    ASSERT_FALSE(m.has_value()) << path;
    EXPECT_EQ(m.error().code(), StatusCode::kInvalidArgument) << path;
    EXPECT_NE(m.error().message().find("is over 65536 bytes"), std::string::npos)
        << m.error().message();
  }
  m = ResolveModel(dir + "/absent.json");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace objectcache
