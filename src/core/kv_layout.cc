#include "objectcache/kv_layout.h"

#include <xxhash.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bounded_read.h"
#include "core/byte_order.h"
#include "core/name_table.h"

namespace objectcache {

namespace {

constexpr NamedValue<KvDtype> kKvDtypeNames[] = {
    {KvDtype::kBf16, "bf16"},
    {KvDtype::kFp16, "fp16"},
    {KvDtype::kFp8, "fp8"},
    {KvDtype::kFp32, "fp32"},
};
static_assert(ListsEveryValueInOrder(kKvDtypeNames, 1));

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) { return NameIn(kKvDtypeNames, dtype, "unknown"); }

Result<KvDtype> ParseKvDtype(std::string_view name) {
  return ParseNameIn(kKvDtypeNames, name, "dtype");
}

uint32_t KvDtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBf16:
    case KvDtype::kFp16:
      return 2;
    case KvDtype::kFp8:
      return 1;
    case KvDtype::kFp32:
      return 4;
  }
  return 0;
}

uint64_t KvLayout::TokenLayerBytes() const {
  const uint64_t vectors = kind == KvKind::kLatent ? 1 : 2;
  return vectors * num_kv_heads * head_dim * KvDtypeBytes(dtype);
}
uint64_t KvLayout::LayerSliceBytes() const { return TokenLayerBytes() * tokens_per_chunk; }
uint64_t KvLayout::ChunkKvBytes() const { return LayerSliceBytes() * num_layers; }
uint64_t KvLayout::TokenBytes() const { return TokenLayerBytes() * num_layers; }

uint64_t KvLayout::Fingerprint() const {
  // Defined in docs/keys.md: XXH3-64, seed 0, over a fixed 32-byte little-endian record.
  ByteWriter w;
  w.Bytes("OCLAYOUT", 8);
  w.U32(1);  // fingerprint definition version
  w.U32(num_layers);
  w.U32(num_kv_heads);
  w.U32(head_dim);
  w.U32(static_cast<uint32_t>(dtype));
  w.U32(tokens_per_chunk);
  // A latent layout appends its kind, so no K-and-V layout's fingerprint changed with it.
  if (kind != KvKind::kKeyValue) w.U32(static_cast<uint32_t>(kind));
  return XXH3_64bits(w.data(), w.size());
}

Status KvLayout::Validate() const {
  auto check = [](const char* what, uint32_t v, uint32_t max) -> Status {
    if (v == 0 || v > max) {
      return InvalidArgumentError(std::string("layout ") + what + " = " + std::to_string(v) +
                                  " is outside 1.." + std::to_string(max));
    }
    return Status();
  };
  OC_RETURN_IF_ERROR(check("layers", num_layers, kMaxLayers));
  OC_RETURN_IF_ERROR(check("kv_heads", num_kv_heads, kMaxKvHeads));
  OC_RETURN_IF_ERROR(check("head_dim", head_dim, kMaxHeadDim));
  OC_RETURN_IF_ERROR(check("tokens_per_chunk", tokens_per_chunk, kMaxTokensPerChunk));
  if (KvDtypeBytes(dtype) == 0) {
    return InvalidArgumentError("layout dtype " + std::to_string(static_cast<int>(dtype)) +
                                " is unknown");
  }
  if (kind != KvKind::kKeyValue && kind != KvKind::kLatent) {
    return InvalidArgumentError("layout kind " + std::to_string(static_cast<int>(kind)) +
                                " is unknown");
  }
  return Status();
}

std::string KvLayout::ToString() const {
  std::ostringstream out;
  out << num_layers << " layers x " << num_kv_heads << " kv heads x " << head_dim << " dim, "
      << KvDtypeName(dtype) << ", G=" << tokens_per_chunk;
  if (kind == KvKind::kLatent) out << ", latent";
  return out.str();
}

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> presets = {
      {"llama-3.1-8b", {32, 8, 128, KvDtype::kBf16, 16}},
      {"llama-3.1-70b", {80, 8, 128, KvDtype::kBf16, 16}},
      {"granite-3.3-8b", {40, 8, 128, KvDtype::kBf16, 16}},
      {"deepseek-r1-distill-qwen-7b", {28, 4, 128, KvDtype::kBf16, 16}},
  };
  return presets;
}

Result<ModelPreset> FindModelPreset(std::string_view name) {
  std::string known;
  for (const ModelPreset& p : ModelPresets()) {
    if (p.name == name) return p;
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  return NotFoundError("unknown layout '" + std::string(name) + "' (known: " + known +
                       "; or give a JSON file)");
}

Result<ModelPreset> ParseModelJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("layout JSON is not a JSON object");
  }
  ModelPreset model;
  model.name = "custom";
  auto read_u32 = [&j](const char* field, uint32_t* out, bool required) -> Status {
    auto it = j.find(field);
    if (it == j.end()) {
      return required ? InvalidArgumentError(std::string("layout JSON lacks \"") + field + "\"")
                      : Status();
    }
    if (!it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) {
      return InvalidArgumentError(std::string("layout JSON field \"") + field +
                                  "\" must be a non-negative integer");
    }
    *out = it->get<uint32_t>();
    return Status();
  };
  OC_RETURN_IF_ERROR(read_u32("layers", &model.layout.num_layers, true));
  OC_RETURN_IF_ERROR(read_u32("kv_heads", &model.layout.num_kv_heads, true));
  OC_RETURN_IF_ERROR(read_u32("head_dim", &model.layout.head_dim, true));
  OC_RETURN_IF_ERROR(read_u32("tokens_per_chunk", &model.layout.tokens_per_chunk, false));
  if (auto it = j.find("dtype"); it != j.end()) {
    if (!it->is_string()) return InvalidArgumentError("layout JSON field \"dtype\" must be text");
    OC_ASSIGN_OR_RETURN(model.layout.dtype, ParseKvDtype(it->get<std::string>()));
  } else {
    return InvalidArgumentError("layout JSON lacks \"dtype\"");
  }
  if (auto it = j.find("kv"); it != j.end()) {
    if (*it == "latent") {
      model.layout.kind = KvKind::kLatent;
    } else if (*it != "kv") {
      return InvalidArgumentError("layout JSON field \"kv\" must be \"kv\" or \"latent\"");
    }
  }
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      return InvalidArgumentError("layout JSON field \"name\" must be non-empty text");
    }
    model.name = it->get<std::string>();
  }
  OC_RETURN_IF_ERROR(model.layout.Validate());
  return model;
}

std::string ModelToJson(const ModelPreset& model) {
  nlohmann::ordered_json j;
  j["name"] = model.name;
  j["layers"] = model.layout.num_layers;
  j["kv_heads"] = model.layout.num_kv_heads;
  j["head_dim"] = model.layout.head_dim;
  j["dtype"] = std::string(KvDtypeName(model.layout.dtype));
  j["tokens_per_chunk"] = model.layout.tokens_per_chunk;
  if (model.layout.kind == KvKind::kLatent) j["kv"] = "latent";
  return j.dump();
}

Result<ModelPreset> ResolveModel(std::string_view name_or_path) {
  bool is_path =
      name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".json");
  if (!is_path) return FindModelPreset(name_or_path);
  const std::string path(name_or_path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open layout file '" + path + "'");
  OC_ASSIGN_OR_RETURN(std::string text,
                      ReadBounded(in, kMaxLayoutFileBytes, "layout file '" + path + "'"));
  Result<ModelPreset> model = ParseModelJson(text);
  if (!model) return model.error().Annotate("layout file '" + path + "'");
  return model;
}

}  // namespace objectcache
