#include "objectcache/chunk_key.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace objectcache {
namespace {

std::vector<uint32_t> Iota(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

KeyNamespace Llama8b(std::string_view tenant = {}) {
  return KeyNamespace("llama-3.1-8b", FindModelPreset("llama-3.1-8b")->layout, tenant);
}

// Golden vectors from scripts/keys_reference.py, an independent implementation of
// docs/keys.md. If one of these changes, every stored cache is orphaned: do not update them.
TEST(ChunkKeyTest, GoldenVectorsLlama8b) {
  KeyNamespace ns = Llama8b();
  EXPECT_EQ(ChunkKey(ns.id()).ToHex(), "c0a5bbac52a5fcc6931e3558845e5447");
  std::vector<ChunkKey> keys = ns.KeysForTokens(Iota(0, 40));
  ASSERT_EQ(keys.size(), 2u);  // the trailing 8 tokens are not a full chunk
  EXPECT_EQ(keys[0].ToHex(), "6d0f5c5d66016c150b2cafada81c8810");
  EXPECT_EQ(keys[1].ToHex(), "6bd6f6b730b400b1c5029e79cfe02e81");
}

TEST(ChunkKeyTest, GoldenVectorsTenantSalt) {
  KeyNamespace ns = Llama8b("acme");
  EXPECT_EQ(ChunkKey(ns.id()).ToHex(), "286dc754dd1880a513b0c9eb12c74983");
  EXPECT_EQ(ns.KeysForTokens(Iota(0, 16))[0].ToHex(), "9c9b54aafd178ffbd43e44ab3e32abd9");
}

TEST(ChunkKeyTest, GoldenVectorsAdapterAndCacheSalt) {
  const KvLayout llama = FindModelPreset("llama-3.1-8b")->layout;
  KeyNamespace adapter("llama-3.1-8b", llama, KeyScope{.adapter = "sql-lora"});
  EXPECT_EQ(ChunkKey(adapter.id()).ToHex(), "5bf207b4a8f5ac3b1f0ad459c38254f3");
  EXPECT_EQ(adapter.KeysForTokens(Iota(0, 16))[0].ToHex(), "993339cde45c963bbdad3b4d0e93a1cb");
  KeyNamespace all("llama-3.1-8b", llama,
                   KeyScope{.tenant_salt = "acme", .adapter = "sql-lora", .cache_salt = "user-7"});
  EXPECT_EQ(ChunkKey(all.id()).ToHex(), "a221b2bcd95c2ef14ceeab211423cb9a");
  EXPECT_EQ(all.KeysForTokens(Iota(0, 16))[0].ToHex(), "92f2ba8338c653e4456deb5dbe74632d");
  // Empty adapter and salt: the namespace of before they existed.
  EXPECT_EQ(KeyNamespace("llama-3.1-8b", llama, KeyScope{}).id(), Llama8b().id());
}

TEST(ChunkKeyTest, GoldenVectorsPerTensorParallelRank) {
  // The engine adapters' namespace for one rank of a tensor-parallel group (docs/keys.md): the
  // model name with the group's size and the rank, the layout of the rank's own KV heads.
  KvLayout half = FindModelPreset("llama-3.1-8b")->layout;
  half.num_kv_heads = 4;
  EXPECT_EQ(half.Fingerprint(), 0x7982b0cb98c5b78full);
  KeyNamespace rank0("llama-3.1-8b/tp2.0", half);
  KeyNamespace rank1("llama-3.1-8b/tp2.1", half);
  EXPECT_EQ(ChunkKey(rank0.id()).ToHex(), "5d4119b3c8c84caae15c62d6003c2a8c");
  EXPECT_EQ(ChunkKey(rank1.id()).ToHex(), "806bb8b5bf858f76849a5e902d53c271");
  EXPECT_EQ(rank0.KeysForTokens(Iota(0, 16))[0].ToHex(), "2254e5f9fb187700114753140221284d");
  EXPECT_EQ(rank1.KeysForTokens(Iota(0, 16))[0].ToHex(), "f20f4f6cdd2b778abe69ee20ff460433");
}

TEST(ChunkKeyTest, GoldenVectorLatentLayout) {
  KvLayout mla{61, 1, 576, KvDtype::kBf16, 16, KvKind::kLatent};
  EXPECT_EQ(mla.Fingerprint(), 0x87ec500c8aae746full);
  KeyNamespace ns("deepseek-v3", mla);
  EXPECT_EQ(ChunkKey(ns.id()).ToHex(), "9c062d42cb2ac6a5947faf6270e23cbd");
  EXPECT_EQ(ns.KeysForTokens(Iota(0, 16))[0].ToHex(), "97809693381819afcb8c9b3af524fa04");
}

TEST(ChunkKeyTest, AdaptersSaltsAndTenantsNeverShareAKey) {
  const KvLayout llama = FindModelPreset("llama-3.1-8b")->layout;
  std::set<ChunkKey> seen;
  size_t made = 0;
  // Moving text between fields must not give the same record either ("a" + "" vs "" + "a").
  for (std::string_view tenant : {"", "a", "ab"}) {
    for (std::string_view adapter : {"", "a", "b", "ab"}) {
      for (std::string_view salt : {"", "a", "b", "ba"}) {
        KeyNamespace ns("llama-3.1-8b", llama,
                        KeyScope{.tenant_salt = tenant, .adapter = adapter, .cache_salt = salt});
        for (const ChunkKey& k : ns.KeysForTokens(Iota(0, 64))) {
          seen.insert(k);
          ++made;
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), made);
}

TEST(ChunkKeyTest, GoldenVectorsOtherLayouts) {
  KeyNamespace qwen("deepseek-r1-distill-qwen-7b",
                    FindModelPreset("deepseek-r1-distill-qwen-7b")->layout);
  std::vector<ChunkKey> keys = qwen.KeysForTokens(Iota(100000, 32));
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].ToHex(), "efb436854d76f85e04d0d1a687b8424e");
  EXPECT_EQ(keys[1].ToHex(), "208711e18c98693d3b3a43bda6208749");

  KeyNamespace tiny("custom", KvLayout{2, 1, 4, KvDtype::kFp8, 4});
  std::vector<uint32_t> tokens = {4294967295u, 0, 1, 2};
  EXPECT_EQ(tiny.KeysForTokens(tokens)[0].ToHex(), "925f6e26119f5f173cd107af93f5e43e");
}

TEST(ChunkKeyTest, KeyNamesWholePrefix) {
  KeyNamespace ns = Llama8b();
  std::vector<uint32_t> a = Iota(0, 48);
  std::vector<uint32_t> b = a;
  b[3] = 999;  // differs in chunk 0 only
  std::vector<ChunkKey> ka = ns.KeysForTokens(a), kb = ns.KeysForTokens(b);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(ka[i], kb[i]) << i;  // every later key differs too
  // Same chunk tokens at another position give another key.
  std::vector<uint32_t> repeated(32, 7);
  std::vector<ChunkKey> kr = ns.KeysForTokens(repeated);
  EXPECT_NE(kr[0], kr[1]);
}

TEST(ChunkKeyTest, ChainContinuesFromParent) {
  KeyNamespace ns = Llama8b();
  std::vector<uint32_t> tokens = Iota(5, 64);
  std::vector<ChunkKey> all = ns.KeysForTokens(tokens);
  std::vector<ChunkKey> tail = ns.KeysForTokens(std::span(tokens).subspan(32), all[1]);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], all[2]);
  EXPECT_EQ(tail[1], all[3]);
}

TEST(ChunkKeyTest, NamespacesSeparateModelsLayoutsAndTenants) {
  KvLayout l = FindModelPreset("llama-3.1-8b")->layout;
  KvLayout fp8 = l;
  fp8.dtype = KvDtype::kFp8;
  std::set<ChunkKey> first_keys;
  std::vector<uint32_t> tokens = Iota(0, 16);
  for (const KeyNamespace& ns :
       {KeyNamespace("llama-3.1-8b", l), KeyNamespace("llama-3.1-8b-instruct", l),
        KeyNamespace("llama-3.1-8b", fp8), KeyNamespace("llama-3.1-8b", l, "tenant-a"),
        KeyNamespace("llama-3.1-8b", l, "tenant-b")}) {
    first_keys.insert(ns.KeysForTokens(tokens)[0]);
  }
  EXPECT_EQ(first_keys.size(), 5u);
}

TEST(ChunkKeyTest, HexRoundTripAndRejectsBadHex) {
  Result<ChunkKey> k = ChunkKey::FromHex("6D0F5C5D66016C150B2CAFADA81C8810");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->ToHex(), "6d0f5c5d66016c150b2cafada81c8810");
  for (const char* bad :
       {"", "6d0f", "6d0f5c5d66016c150b2cafada81c881", "6d0f5c5d66016c150b2cafada81c88100",
        "6d0f5c5d66016c150b2cafada81c881g", " d0f5c5d66016c150b2cafada81c8810"}) {
    Result<ChunkKey> r = ChunkKey::FromHex(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ChunkKeyTest, ExternalBlockHashes) {
  ChunkKey::Bytes vllm_hash{};
  vllm_hash[0] = 0xab;
  vllm_hash[15] = 0x01;
  ChunkKey verbatim = ChunkKey::FromBytes(vllm_hash);
  EXPECT_EQ(verbatim.ToHex(), "ab000000000000000000000000000001");
  ChunkKey folded_a = Llama8b().FromBlockHash(vllm_hash);
  ChunkKey folded_b = Llama8b("acme").FromBlockHash(vllm_hash);
  EXPECT_NE(folded_a, verbatim);
  EXPECT_NE(folded_a, folded_b);
  EXPECT_EQ(folded_a, Llama8b().FromBlockHash(vllm_hash));
}

}  // namespace
}  // namespace objectcache
