#include "wire/layerwise_request.h"

#include <nlohmann/json.hpp>

#include "wire/bounded_json.h"
#include "wire/layerwise_wire.h"

namespace objectcache::wire {

std::string EncodeLayerwiseRequest(const LayerwiseRequestBody& request) {
  nlohmann::json keys = nlohmann::json::array();
  for (const ChunkKey& k : request.keys) keys.push_back(k.ToHex());
  nlohmann::json body;
  body["version"] = request.version;
  body["keys"] = std::move(keys);
  body["layers"] = {request.first, request.last};
  if (request.model) body["layout"] = nlohmann::json::parse(ModelToJson(*request.model));
  if (request.compute_seconds_per_layer > 0) {
    body["compute_seconds_per_layer"] = request.compute_seconds_per_layer;
  }
  return body.dump();
}

Result<LayerwiseRequestBody> DecodeLayerwiseRequest(std::string_view body, size_t max_keys) {
  std::string why;
  nlohmann::json j = ParseBoundedJson(body, {.max_values = max_keys + 256}, &why);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("layerwise body is not a JSON object" +
                                (why.empty() ? std::string() : ": " + why));
  }
  // Every field's type is checked before it is read: nlohmann::json throws on a wrong type.
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_integer() ||
      (v->get<int64_t>() != kLayerwiseV1 && v->get<int64_t>() != kLayerwiseV2)) {
    return InvalidArgumentError("layerwise request version must be 1 or 2");
  }
  LayerwiseRequestBody r;
  r.version = static_cast<uint16_t>(v->get<int64_t>());
  auto keys = j.find("keys");
  if (keys == j.end() || !keys->is_array() || keys->empty() || keys->size() > max_keys) {
    return InvalidArgumentError("\"keys\" must list 1 to " + std::to_string(max_keys) +
                                " chunk keys");
  }
  for (const auto& k : *keys) {
    Result<ChunkKey> key = k.is_string() ? ChunkKey::FromHex(k.get<std::string>())
                                         : Result<ChunkKey>(InvalidArgumentError("not text"));
    if (!key) return InvalidArgumentError("\"keys\" holds something that is not a chunk key");
    r.keys.push_back(*key);
  }
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array() || layers->size() != 2 ||
      !(*layers)[0].is_number_unsigned() || !(*layers)[1].is_number_unsigned() ||
      (*layers)[0].get<uint64_t>() > UINT32_MAX || (*layers)[1].get<uint64_t>() > UINT32_MAX) {
    return InvalidArgumentError("\"layers\" must be [first, last)");
  }
  r.first = (*layers)[0].get<uint32_t>();
  r.last = (*layers)[1].get<uint32_t>();
  if (auto layout = j.find("layout"); layout != j.end()) {
    Result<ModelPreset> m = layout->is_string() ? FindModelPreset(layout->get<std::string>())
                                                : ParseModelJson(layout->dump());
    if (!m) return InvalidArgumentError("\"layout\": " + m.error().message());
    r.model = *m;
  }
  if (auto t = j.find("compute_seconds_per_layer"); t != j.end()) {
    if (!t->is_number() || !(t->get<double>() > 0) || !(t->get<double>() < 3600)) {
      return InvalidArgumentError("\"compute_seconds_per_layer\" must be a positive number");
    }
    r.compute_seconds_per_layer = t->get<double>();
  }
  return r;
}

}  // namespace objectcache::wire
