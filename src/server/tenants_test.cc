#include "server/tenants.h"

#include <gtest/gtest.h>

namespace objectcache::server {
namespace {

TEST(TenantsFileTest, ParsesTenantsKeysAndQuotas) {
  auto tenants = ParseTenantsFile(R"(
# two teams
[tenants.team-a]
quota = "2MiB"
over_quota = "evict"
[tenants.team-a.keys]
AKA1 = "secret-a1"
AKA2 = "secret-a2"

[tenants.b_2]
keys = { AKB = "secret-b" }
)",
                                  "creds.toml");
  ASSERT_TRUE(tenants.has_value()) << tenants.error().ToString();
  ASSERT_EQ(tenants->size(), 2u);
  const TenantConfig& a = (*tenants)[1].name == "team-a" ? (*tenants)[1] : (*tenants)[0];
  const TenantConfig& b = (*tenants)[1].name == "team-a" ? (*tenants)[0] : (*tenants)[1];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.quota_bytes, 2u << 20);
  EXPECT_EQ(a.over_quota, OverQuota::kEvict);
  EXPECT_EQ(a.keys.size(), 2u);
  EXPECT_EQ(a.keys.at("AKA2"), "secret-a2");
  EXPECT_EQ(b.name, "b_2");
  EXPECT_FALSE(b.quota_bytes.has_value());
  EXPECT_EQ(b.over_quota, OverQuota::kReject);
  EXPECT_EQ(b.keys.at("AKB"), "secret-b");
  EXPECT_TRUE(ParseTenantsFile("", "empty.toml")->empty());
}

TEST(TenantsFileTest, RefusesWhatItCannotHonour) {
  const std::pair<const char*, const char*> bad[] = {
      {"[tenants.a\n", "creds.toml:1"},  // TOML syntax
      {"[other]\nx = 1\n", "unknown section 'other'"},
      {"[tenants.a]\nquota = 5\n", "quota must be a string"},
      {"[tenants.a]\nquota = \"lots\"\n", "quota"},
      {"[tenants.a]\nquota = \"99999999999999999999\"\n", "quota"},  // past u64
      {"[tenants.a]\nover_quota = \"shrug\"\n", "over_quota must be"},
      {"[tenants.a]\nover_quota = \"evict\"\n", "needs a quota"},
      {"[tenants.a]\nquota = \"0\"\nover_quota = \"evict\"\n", "needs a quota above 0"},
      {"[tenants.a]\nquotas = \"1GiB\"\n", "unknown field 'quotas'"},
      {"[tenants.a.keys]\nK = \"\"\n", "non-empty secret"},
      {"[tenants.a.keys]\nK = 7\n", "non-empty secret"},
      {"[tenants.a]\nkeys = \"K\"\n", "keys must be a table"},
      {"[tenants.\"A b\"]\n", "tenant name 'A b'"},
      {"[tenants.\"../x\"]\n", "tenant name '../x'"},
      {"[tenants.a.keys]\nK = \"s\"\n[tenants.b.keys]\nK = \"t\"\n", "'K' is given twice"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParseTenantsFile(text, "creds.toml");
    ASSERT_FALSE(r.has_value()) << text;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(why), std::string::npos) << r.error().message();
  }
}

TEST(TenantsFileTest, EachTenantHasANamespaceOfItsOwn) {
  TenantConfig a{.name = "a"};
  TenantConfig evicting{.name = "e", .quota_bytes = 1000, .over_quota = OverQuota::kEvict};
  TenantConfig refusing{.name = "r", .quota_bytes = 1000, .over_quota = OverQuota::kReject};
  EXPECT_EQ(*TenantStoreUri("/var/lib/oc", a), "/var/lib/oc/tenants/a");
  EXPECT_EQ(*TenantStoreUri("file:///var/lib/oc/?open_files=9", a),
            "file:///var/lib/oc/tenants/a?open_files=9");
  EXPECT_EQ(*TenantStoreUri("file:///d", evicting), "file:///d/tenants/e?capacity=1000");
  // A local store's capacity is shared by the server's store and its tenants', not copied.
  EXPECT_EQ(*TenantStoreUri("file:///d?capacity=5&open_files=9", evicting),
            "file:///d/tenants/e?open_files=9&capacity=1000");
  EXPECT_EQ(*TenantStoreUri("file:///d?capacity=5", refusing), "file:///d/tenants/r");
  EXPECT_EQ(*TenantStoreUri("file:///d?capacity=5", a), "file:///d/tenants/a");
  EXPECT_EQ(ServerCapacity("file:///d?open_files=9&capacity=5KiB").value()->limit, 5120u);
  EXPECT_EQ(ServerCapacity("/d?capacity=7").value()->limit, 7u);
  EXPECT_EQ(ServerCapacity("file:///d").value(), nullptr);
  EXPECT_EQ(ServerCapacity("rados://kv?capacity=5").value(), nullptr);
  EXPECT_EQ(ServerCapacity("file:///d?capacity=lots").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*TenantStoreUri("rados://kv?namespace=p&capacity=5", evicting),
            "rados://kv?namespace=p.e&capacity=1000");
  // RADOS tracks usage only with a capacity: a refusing tenant gets one it never reaches.
  EXPECT_EQ(*TenantStoreUri("rados://kv", refusing),
            "rados://kv?namespace=r&capacity=18446744073709551615");
  EXPECT_EQ(*TenantStoreUri("file:///d", refusing), "file:///d/tenants/r");
  EXPECT_EQ(*TenantStoreUri("rados://kv?conf=/c.conf&namespace=prod", a),
            "rados://kv?conf=/c.conf&namespace=prod.a");
  EXPECT_EQ(*TenantStoreUri("rados://kv", a), "rados://kv?namespace=a");
  EXPECT_EQ(*TenantStoreUri("mem://", a), "mem://");
  // The memory store has no eviction: an evicting quota over it is refused, saying so.
  const Result<std::string> mem_evicting = TenantStoreUri("mem://", evicting);
  ASSERT_FALSE(mem_evicting.has_value());
  EXPECT_NE(mem_evicting.error().message().find("cannot evict"), std::string::npos);
  EXPECT_EQ(*TenantStoreUri("mem://", refusing), "mem://");
  EXPECT_EQ(TenantStoreUri("s3://h:1/b", a).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace objectcache::server
