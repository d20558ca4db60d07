// The KV extensions' small requests: the batch lookup and pins (docs/s3-api.md); the layerwise
// retrieval is in layerwise.cc, the batch store in batch_store.cc.
#include <nlohmann/json.hpp>

#include "objectcache/chunk_key.h"
#include "s3/crypto.h"
#include "server/s3_handler.h"
#include "wire/bounded_json.h"
#include "wire/lookup_wire.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

namespace {

constexpr uint64_t kMaxPinSeconds = 365ull * 24 * 3600;

}  // namespace

S3Result<std::vector<std::string>> S3Handler::BodyKeys(const Ctx& c, const nlohmann::json& j,
                                                       std::string_view what) const {
  if (j.is_discarded() || !j.is_object() || !j.contains("keys") || !j["keys"].is_array()) {
    return Fail("InvalidArgument",
                std::string(what) + " body must be {\"keys\": [\"key\", ...], ...}");
  }
  const nlohmann::json& list = j["keys"];
  if (list.size() > options_.max_lookup_keys) {
    return Fail("InvalidArgument", std::string(what) + " takes at most " +
                                       std::to_string(options_.max_lookup_keys) + " keys");
  }
  std::vector<std::string> keys;
  keys.reserve(list.size());
  for (const auto& k : list) {
    if (!k.is_string() || k.get<std::string>().empty() ||
        k.get<std::string>().size() > kMaxS3KeyBytes) {
      return Fail("InvalidArgument",
                  std::string(what) + " keys must be non-empty strings of at most 1024 bytes");
    }
    // A KV bucket holds chunk objects only, under their keys: any other name is a mistake.
    if (c.bucket.layout && !ChunkKey::FromHex(k.get<std::string>()).has_value()) {
      return Fail("InvalidArgument", std::string(what) +
                                         " keys in a KV-layout bucket are chunk keys (32 hex "
                                         "digits), not '" +
                                         k.get<std::string>().substr(0, 64) + "'");
    }
    keys.push_back(ObjectKey(c.req.bucket, k.get<std::string>()));
  }
  return keys;
}

asio::awaitable<S3Result<void>> S3Handler::BatchLookup(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 16 + options_.max_lookup_keys * 1100);
  if (!body) co_return std::unexpected(body.error());
  StoreNames names;
  const std::string* type = c.req.Header("content-type");
  if (type && *type == wire::kChunkKeysContentType) {
    // The binary body: chunk keys, 16 bytes each (src/wire/lookup_wire.h).
    Result<std::vector<ChunkKey>> chunk_keys =
        wire::ParseChunkKeys(AsBytes(*body), options_.max_lookup_keys);
    if (!chunk_keys) co_return Fail("InvalidArgument", chunk_keys.error().message());
    names = ChunkObjectKeyViews(c.req.bucket, *chunk_keys);
  } else {
    const nlohmann::json j =
        wire::ParseBoundedJson(*body, {.max_values = options_.max_lookup_keys + 16});
    S3Result<std::vector<std::string>> parsed = BodyKeys(c, j, "lookup");
    if (!parsed) co_return std::unexpected(parsed.error());
    names.owned = std::move(*parsed);
    names.views.assign(names.owned.begin(), names.owned.end());
  }
  const std::span<const std::string_view> keys = names.views;
  auto present = co_await Blocking([&] { return store_->Exist(keys); });
  if (!present) co_return std::unexpected(FromStatus(present.error()));
  size_t prefix = 0;
  while (prefix < present->size() && (*present)[prefix]) ++prefix;
  std::string bitmap((keys.size() + 7) / 8, '\0');
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*present)[i]) bitmap[i / 8] = static_cast<char>(bitmap[i / 8] | (1 << (i % 8)));
  }
  nlohmann::json out;
  out["count"] = keys.size();
  out["present_prefix"] = prefix;
  out["present"] = static_cast<size_t>(std::count(present->begin(), present->end(), true));
  out["bitmap"] = Base64Encode(bitmap);
  metrics_->store_hits += prefix;
  co_return co_await ReplyJson(c, out.dump());
}

asio::awaitable<S3Result<void>> S3Handler::PinKeys(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 64 + options_.max_lookup_keys * 1100);
  if (!body) co_return std::unexpected(body.error());
  const nlohmann::json j =
      wire::ParseBoundedJson(*body, {.max_values = options_.max_lookup_keys + 16});
  S3Result<std::vector<std::string>> keys = BodyKeys(c, j, "pin");
  if (!keys) co_return std::unexpected(keys.error());
  const auto ttl = j.find("ttl_seconds");
  if (ttl == j.end() || !ttl->is_number_unsigned() || ttl->get<uint64_t>() == 0 ||
      ttl->get<uint64_t>() > kMaxPinSeconds) {
    co_return Fail("InvalidArgument",
                   "pin needs \"ttl_seconds\": 1 to " + std::to_string(kMaxPinSeconds));
  }
  const int64_t until = options_.now() + static_cast<int64_t>(ttl->get<uint64_t>());
  std::vector<Status> results = co_await Blocking([&] {
    std::vector<Status> out;
    out.reserve(keys->size());
    for (const std::string& key : *keys) out.push_back(store_->Pin(key, until));
    return out;
  });
  nlohmann::json missing = nlohmann::json::array();
  size_t pinned = 0;
  const size_t name_from = c.req.bucket.size() + 1;  // the S3 key within the store name
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) {
      pinned++;
    } else if (results[i].code() == StatusCode::kNotFound) {
      missing.push_back((*keys)[i].substr(name_from));
    } else {
      co_return std::unexpected(FromStatus(results[i]));
    }
  }
  nlohmann::json out;
  out["pinned"] = pinned;
  out["until"] = until;
  out["missing"] = std::move(missing);
  co_return co_await ReplyJson(c, out.dump());
}

}  // namespace objectcache::server
