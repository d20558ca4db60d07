// Tenants (docs/tenants.md): the credentials file, each tenant's store namespace and quota, and
// the front handler that gives each request to its tenant's S3Handler.
//
// A tenant is a name, its access keys, and optionally a byte quota with what to do when a
// write would pass it (refuse: 403 QuotaExceeded; or evict that tenant's least recently used
// objects). Each tenant has a store of its own within the server's store (a directory of the
// local store, a RADOS namespace), so no request of one tenant can read, list, overwrite,
// evict or time the objects of another, even under the same keys: the same prompt cached by
// two tenants is two objects. Bucket names are one namespace across tenants, as in S3.
//
// The credentials file (TOML) is read at start and again on SIGHUP:
//
//   [tenants.team-a]
//   quota = "200GiB"        # optional: no quota
//   over_quota = "reject"   # or "evict"
//   [tenants.team-a.keys]
//   AKTEAMA1 = "secret-of-at-least-16-bytes"
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "objectcache/status.h"
#include "objectcache/store.h"
#include "objectcache/store_registry.h"
#include "server/http_exchange.h"
#include "server/s3_handler.h"
#include "store/quota_store.h"

namespace objectcache::server {

enum class OverQuota { kReject, kEvict };

struct TenantConfig {
  std::string name;                         // [a-z0-9][a-z0-9_-]*, at most 63 bytes
  std::map<std::string, std::string> keys;  // access key -> secret key
  std::optional<uint64_t> quota_bytes;      // unset: no quota
  OverQuota over_quota = OverQuota::kReject;
};

// The tenants of a credentials file. InvalidArgument, naming `source` and the line where it
// can, for TOML errors, unknown fields, bad names or sizes, a key given twice, an empty secret.
Result<std::vector<TenantConfig>> ParseTenantsFile(std::string_view text, std::string_view source);

// Tenant `t`'s store within the server's store `base`: file:///P (or a path) ->
// file:///P/tenants/NAME, rados://POOL?..&namespace=NS -> namespace NS.NAME (NAME without
// one), mem:// -> a memory store of its own; capacity=QUOTA for an evicting tenant. A local
// store's capacity is not copied: it bounds the server's store and every tenant's together
// (ServerCapacity). InvalidArgument for s3:// (an upstream bucket has no namespaces to give).
Result<std::string> TenantStoreUri(std::string_view base, const TenantConfig& t);

// The capacity the server's local store (file:// or a path, with capacity=) shares with its
// tenants' stores; null for any other store. InvalidArgument for a malformed capacity.
Result<std::shared_ptr<SharedCapacity>> ServerCapacity(std::string_view base);

class TenantRouter final : public RequestHandler {
 public:
  // `options` are every tenant handler's, without credentials. Requests naming no known key
  // (and the unsigned health and metrics endpoints) go to a handler over `base_store` that
  // knows no credentials: it answers them, or refuses them as S3 does.
  // `capacity`: ServerCapacity(base_uri), shared with `base_store`.
  TenantRouter(std::string base_uri, Store* base_store, ServerMetrics* metrics, S3Options options,
               std::shared_ptr<SharedCapacity> capacity);
  ~TenantRouter() override;

  // Applies the credentials file's tenants, at start and on SIGHUP: new tenants get their
  // stores and handlers; rotated keys take effect for new requests; keys no longer listed stop
  // working; a quota changes at once for a refusing tenant (an evicting tenant's store keeps
  // the capacity it was opened with until a restart, which is logged). On an error (a store
  // that does not open) nothing changes.
  Status Apply(const std::vector<TenantConfig>& tenants);

  asio::awaitable<void> Handle(HttpExchange& exchange) override;
  TransportErrorResponse DescribeTransportFailure(TransportFailure failure,
                                                  const std::string& detail) const override {
    return S3TransportErrorResponse(failure, detail);
  }
  // Quiesces every tenant's handler, retired ones included, and the handler of unknown keys.
  void Quiesce() override;

  // Per-tenant series for /metrics: requests, objects and bytes stored, quota, refusals,
  // evictions.
  std::string RenderMetrics() const;

 private:
  struct Tenant {
    TenantConfig config;
    std::unique_ptr<Store> store;
    QuotaStore* quota = nullptr;  // within `store`, when the tenant refuses over its quota
    std::unique_ptr<S3Handler> handler;
    std::atomic<uint64_t> requests{0};
  };
  Result<std::shared_ptr<Tenant>> OpenTenant(const TenantConfig& config);
  // Blocking: whether a tenant other than `asking` has bucket `bucket`.
  bool BucketElsewhere(const std::string& asking, const std::string& bucket) const;

  const std::string base_uri_;
  const std::shared_ptr<SharedCapacity> capacity_;
  ServerMetrics* metrics_;
  const S3Options options_;
  std::unique_ptr<S3Handler> unknown_;  // requests that name no tenant's key
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Tenant>> tenants_;           // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<Tenant>> by_key_;  // guarded by mu_
  // Tenants dropped by a reload: their handlers may still be serving requests, and a reload
  // that adds one back takes it from here.
  std::vector<std::shared_ptr<Tenant>> retired_;  // guarded by mu_
};

}  // namespace objectcache::server
