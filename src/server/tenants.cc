#include "server/tenants.h"

#include <toml++/toml.h>
#include <set>

#include "core/query_string.h"
#include "objectcache/store_registry.h"
#include "s3/sigv4.h"
#include "server/log.h"

namespace objectcache::server {
namespace {

bool ValidTenantName(std::string_view n) {
  if (n.empty() || n.size() > 63) return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  }
  return n.front() != '-' && n.front() != '_';
}

std::string Where(std::string_view source, const toml::node& node) {
  return std::string(source) + ":" + std::to_string(node.source().begin.line);
}

Result<TenantConfig> ParseTenant(std::string_view source, std::string_view name,
                                 const toml::table& t) {
  TenantConfig c;
  c.name = std::string(name);
  if (!ValidTenantName(name)) {
    return InvalidArgumentError(Where(source, t) + ": tenant name '" + c.name +
                                "' must be 1-63 of a-z 0-9 - _, starting with a letter or digit");
  }
  for (const auto& [field, value] : t) {
    const std::string where = Where(source, value) + ": tenant " + c.name + ": ";
    if (field == "quota") {
      const std::optional<std::string_view> text = value.value<std::string_view>();
      if (!text) return InvalidArgumentError(where + "quota must be a string such as \"100GiB\"");
      Result<uint64_t> bytes = ParseByteSize(*text);
      if (!bytes) return InvalidArgumentError(where + "quota: " + bytes.error().message());
      c.quota_bytes = *bytes;
    } else if (field == "over_quota") {
      const std::optional<std::string_view> mode = value.value<std::string_view>();
      if (mode == "reject") {
        c.over_quota = OverQuota::kReject;
      } else if (mode == "evict") {
        c.over_quota = OverQuota::kEvict;
      } else {
        return InvalidArgumentError(where + "over_quota must be \"reject\" or \"evict\"");
      }
    } else if (field == "keys") {
      const toml::table* keys = value.as_table();
      if (keys == nullptr) {
        return InvalidArgumentError(where + "keys must be a table of ACCESS_KEY = \"SECRET\"");
      }
      for (const auto& [access, secret] : *keys) {
        const std::optional<std::string_view> s = secret.value<std::string_view>();
        if (access.str().empty() || !s || s->empty()) {
          return InvalidArgumentError(Where(source, secret) + ": tenant " + c.name +
                                      ": each key needs a non-empty secret string");
        }
        c.keys.emplace(std::string(access.str()), std::string(*s));
      }
    } else {
      return InvalidArgumentError(where + "unknown field '" + std::string(field.str()) +
                                  "' (known: quota, over_quota, keys)");
    }
  }
  if (c.over_quota == OverQuota::kEvict && !c.quota_bytes.value_or(0)) {
    return InvalidArgumentError(Where(source, t) + ": tenant " + c.name +
                                ": over_quota = \"evict\" needs a quota above 0");
  }
  return c;
}

// Appends "&name=value" or "?name=value" to a URI.
void AddQueryOption(std::string* uri, std::string_view name, std::string_view value) {
  *uri += (uri->find('?') == std::string::npos ? "?" : "&") + std::string(name) + "=" +
          std::string(value);
}

std::string Label(std::string_view tenant) { return "{tenant=\"" + std::string(tenant) + "\"}"; }

}  // namespace

Result<std::vector<TenantConfig>> ParseTenantsFile(std::string_view text, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgumentError(std::string(source) + ":" + std::to_string(e.source().begin.line) +
                                ": " + std::string(e.description()));
  }
  std::vector<TenantConfig> out;
  std::set<std::string> seen_keys;
  for (const auto& [section, value] : root) {
    const toml::table* tenants = value.as_table();
    if (section != "tenants" || tenants == nullptr) {
      return InvalidArgumentError(Where(source, value) + ": unknown section '" +
                                  std::string(section.str()) + "' (known: [tenants.NAME])");
    }
    for (const auto& [name, tenant] : *tenants) {
      const toml::table* t = tenant.as_table();
      if (t == nullptr) {
        return InvalidArgumentError(Where(source, tenant) + ": tenants." + std::string(name.str()) +
                                    " must be a table");
      }
      OC_ASSIGN_OR_RETURN(TenantConfig c, ParseTenant(source, name.str(), *t));
      for (const auto& [access, secret] : c.keys) {
        if (!seen_keys.insert(access).second) {
          return InvalidArgumentError(std::string(source) + ": access key '" + access +
                                      "' is given twice");
        }
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

Result<std::string> TenantStoreUri(std::string_view base, const TenantConfig& t) {
  const bool evicts = t.quota_bytes && t.over_quota == OverQuota::kEvict;
  const size_t q = base.find('?');
  std::string uri(base.substr(0, q));
  std::string ns;  // rados: the server's namespace, then "."
  const bool rados = base.starts_with("rados://");
  if (base == "mem://" || base == "mem:") {
    if (evicts) {
      return InvalidArgumentError("tenant " + t.name +
                                  ": the memory store cannot evict; give it over_quota = "
                                  "\"reject\", or serve a file:// or rados:// store");
    }
    uri = "mem://";
  } else if (!rados && !base.starts_with("file://") && base.find("://") != std::string_view::npos) {
    return InvalidArgumentError(
        "tenants need a store with namespaces (file://, rados://, mem://); " + std::string(base) +
        " has none");
  } else if (!rados) {
    while (uri.size() > 1 && uri.back() == '/') uri.pop_back();
    uri += "/tenants/" + t.name;
  }
  // The server's options carry over, but not a local store's capacity (shared instead,
  // ServerCapacity), and an evicting tenant's capacity is its quota.
  OC_RETURN_IF_ERROR(
      ForEachQueryPair(q == std::string_view::npos ? std::string_view() : base.substr(q + 1),
                       [&](std::string_view name, std::optional<std::string_view> value) -> Status {
                         if (rados && name == "namespace") {
                           ns = std::string(value.value_or("")) + ".";
                         } else if (name != "capacity" || (rados && !evicts)) {
                           AddQueryOption(&uri, name, value.value_or(""));
                         }
                         return Status();
                       }));
  if (rados) AddQueryOption(&uri, "namespace", ns + t.name);
  if (evicts) {
    AddQueryOption(&uri, "capacity", std::to_string(*t.quota_bytes));
  } else if (rados && t.quota_bytes && uri.find("capacity=") == std::string::npos) {
    // A refusing quota needs the usage, which RADOS tracks only with a capacity: one that
    // is never reached.
    AddQueryOption(&uri, "capacity", std::to_string(UINT64_MAX));
  }
  return uri;
}

Result<std::shared_ptr<SharedCapacity>> ServerCapacity(std::string_view base) {
  const bool local = base.starts_with("file://") || base.find("://") == std::string_view::npos;
  const size_t q = base.find('?');
  std::shared_ptr<SharedCapacity> capacity;
  if (!local || q == std::string_view::npos) return capacity;
  OC_RETURN_IF_ERROR(ForEachQueryPair(
      base.substr(q + 1), [&](std::string_view name, std::optional<std::string_view> value) {
        if (name != "capacity") return Status();
        Result<uint64_t> bytes = ParseStoreCapacity(value.value_or(""));
        if (!bytes) return bytes.error();
        capacity = std::make_shared<SharedCapacity>(*bytes);
        return Status();
      }));
  return capacity;
}

TenantRouter::TenantRouter(std::string base_uri, Store* base_store, ServerMetrics* metrics,
                           S3Options options, std::shared_ptr<SharedCapacity> capacity)
    : base_uri_(std::move(base_uri)),
      capacity_(std::move(capacity)),
      metrics_(metrics),
      options_(std::move(options)) {
  S3Options unknown = options_;
  unknown.credentials.clear();
  unknown.anonymous = false;
  unknown_ = std::make_unique<S3Handler>(base_store, metrics_, std::move(unknown));
}

TenantRouter::~TenantRouter() = default;

void TenantRouter::Quiesce() {
  // Not under mu_: a store call still running may ask BucketElsewhere, which takes it.
  std::vector<std::shared_ptr<Tenant>> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, t] : tenants_) all.push_back(t);
    all.insert(all.end(), retired_.begin(), retired_.end());
  }
  for (const auto& t : all) t->handler->Quiesce();
  unknown_->Quiesce();
}

Result<std::shared_ptr<TenantRouter::Tenant>> TenantRouter::OpenTenant(const TenantConfig& config) {
  auto t = std::make_shared<Tenant>();
  t->config = config;
  OC_ASSIGN_OR_RETURN(const std::string uri, TenantStoreUri(base_uri_, config));
  Result<std::unique_ptr<Store>> store = OpenStore(uri, {.shared_capacity = capacity_});
  if (!store) return store.error().Annotate("opening tenant " + config.name + "'s store " + uri);
  t->store = std::move(*store);
  if (config.quota_bytes && config.over_quota == OverQuota::kReject) {
    Result<std::unique_ptr<QuotaStore>> quota =
        NewQuotaStore(std::move(t->store), *config.quota_bytes);
    if (!quota) return quota.error().Annotate("tenant " + config.name);
    t->quota = quota->get();
    t->store = std::move(*quota);
  }
  S3Options options = options_;
  options.credentials = config.keys;
  options.anonymous = false;
  options.bucket_elsewhere = [this, name = config.name](const std::string& bucket) {
    return BucketElsewhere(name, bucket);
  };
  t->handler = std::make_unique<S3Handler>(t->store.get(), metrics_, std::move(options));
  return t;
}

Status TenantRouter::Apply(const std::vector<TenantConfig>& tenants) {
  // Every tenant ever opened, by name: a tenant removed and added back gets its store again
  // (a local store directory is open by one owner at a time).
  std::map<std::string, std::shared_ptr<Tenant>> known;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : retired_) known[t->config.name] = t;
    for (const auto& [name, t] : tenants_) known[name] = t;
  }
  // First open every new tenant, outside the lock: a failure changes nothing.
  std::map<std::string, std::shared_ptr<Tenant>> next;
  for (const TenantConfig& c : tenants) {
    if (!known.contains(c.name)) {
      OC_ASSIGN_OR_RETURN(next[c.name], OpenTenant(c));
    }
  }
  // Then the known ones take their new keys and quotas.
  for (const TenantConfig& c : tenants) {
    auto it = known.find(c.name);
    if (it == known.end()) continue;
    Tenant& t = *it->second;
    const TenantConfig& old = t.config;
    if (old.quota_bytes.has_value() != c.quota_bytes.has_value() ||
        old.over_quota != c.over_quota ||
        (c.over_quota == OverQuota::kEvict && old.quota_bytes != c.quota_bytes)) {
      LogWarn("tenant " + c.name +
              ": a changed quota mode or evicting capacity takes effect at the next restart");
    } else if (t.quota != nullptr && c.quota_bytes) {
      t.quota->SetQuota(*c.quota_bytes);
    }
    t.handler->SetCredentials(c.keys);
    next[c.name] = it->second;
  }
  std::unordered_map<std::string, std::shared_ptr<Tenant>> by_key;
  for (const TenantConfig& c : tenants) {
    for (const auto& [access, secret] : c.keys) by_key[access] = next[c.name];
  }
  std::lock_guard lock(mu_);
  retired_.clear();
  for (auto& [name, t] : known) {
    if (!next.contains(name)) retired_.push_back(t);
  }
  tenants_ = std::move(next);
  by_key_ = std::move(by_key);
  return Status();
}

bool TenantRouter::BucketElsewhere(const std::string& asking, const std::string& bucket) const {
  std::vector<std::shared_ptr<Tenant>> others;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, t] : tenants_) {
      if (name != asking) others.push_back(t);
    }
  }
  const std::string key = BucketObjectKey(bucket);
  for (const auto& t : others) {
    if (t->store->Stat(key).has_value()) return true;
  }
  return false;
}

asio::awaitable<void> TenantRouter::Handle(HttpExchange& exchange) {
  std::shared_ptr<Tenant> tenant;
  // Parsed once, here: the handler takes it as it is (every handler has these domains).
  s3::S3Result<s3::S3Request> parsed =
      s3::ParseS3Request(exchange.method(), exchange.target(), exchange.RequestHeaders(),
                         options_.virtual_host_domains);
  if (parsed) {
    const std::string access = s3::ClaimedAccessKey(*parsed);
    std::lock_guard lock(mu_);
    if (auto it = by_key_.find(access); !access.empty() && it != by_key_.end()) tenant = it->second;
  }
  if (!tenant) {
    co_await unknown_->HandleParsed(exchange, parsed);
    co_return;
  }
  tenant->requests++;
  co_await tenant->handler->HandleParsed(exchange, parsed);
}

std::string TenantRouter::RenderMetrics() const {
  std::map<std::string, std::shared_ptr<Tenant>> tenants;
  {
    std::lock_guard lock(mu_);
    tenants = tenants_;
  }
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [tenant, t] : tenants) {
      if (std::optional<uint64_t> v = value(*t)) {
        out += name + Label(tenant) + " " + std::to_string(*v) + "\n";
      }
    }
  };
  family("objectcache_tenant_requests_total", "counter", "Requests signed with the tenant's keys.",
         [](const Tenant& t) -> std::optional<uint64_t> { return t.requests.load(); });
  family("objectcache_tenant_objects", "gauge", "Objects in the tenant's store.",
         [](const Tenant& t) -> std::optional<uint64_t> { return t.store->Usage().objects; });
  family("objectcache_tenant_bytes", "gauge", "Payload bytes in the tenant's store.",
         [](const Tenant& t) -> std::optional<uint64_t> { return t.store->Usage().bytes; });
  family("objectcache_tenant_quota_bytes", "gauge", "The tenant's quota.",
         [](const Tenant& t) -> std::optional<uint64_t> {
           return t.quota != nullptr ? t.quota->quota() : t.config.quota_bytes;
         });
  family("objectcache_tenant_quota_rejections_total", "counter",
         "Writes refused 403 QuotaExceeded.", [](const Tenant& t) -> std::optional<uint64_t> {
           if (t.quota == nullptr) return std::nullopt;
           return t.quota->rejections();
         });
  family("objectcache_tenant_evictions_total", "counter",
         "Objects evicted to keep the tenant within its quota.",
         [](const Tenant& t) -> std::optional<uint64_t> { return t.store->Usage().evictions; });
  return out;
}

}  // namespace objectcache::server
