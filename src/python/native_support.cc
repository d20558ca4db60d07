#include "python/native_support.h"

#include <cstring>

namespace objectcache::python {

PyObject* g_error_type = nullptr;

[[noreturn]] void Raise(const Status& s) {
  py::object error = py::reinterpret_borrow<py::object>(g_error_type)(s.message());
  error.attr("code") = std::string(StatusCodeName(s.code()));
  error.attr("message") = s.message();
  PyErr_SetObject(g_error_type, error.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

void CheckArgument(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument) throw py::value_error(s.message());
  Check(s);
}

// ---- keys and tokens -------------------------------------------------------------------------

ChunkKey ToKey(py::handle h) {
  if (py::isinstance<py::bytes>(h)) {
    std::string b = h.cast<std::string>();
    if (b.size() != ChunkKey::kBytes) {
      throw py::value_error("a chunk key is 16 bytes, not " + std::to_string(b.size()));
    }
    ChunkKey::Bytes bytes;
    std::memcpy(bytes.data(), b.data(), bytes.size());
    return ChunkKey(bytes);
  }
  if (py::isinstance<py::str>(h)) {
    Result<ChunkKey> k = ChunkKey::FromHex(h.cast<std::string>());
    if (!k) throw py::value_error(k.error().message());
    return *k;
  }
  throw py::type_error("a chunk key is 16 bytes or 32 hex digits");
}

std::vector<ChunkKey> ToKeys(py::iterable keys) {
  std::vector<ChunkKey> out;
  for (py::handle h : keys) out.push_back(ToKey(h));
  return out;
}

py::bytes KeyBytes(const ChunkKey& k) {
  return py::bytes(reinterpret_cast<const char*>(k.bytes().data()), k.bytes().size());
}

py::list KeyList(const std::vector<ChunkKey>& keys) {
  py::list out;
  for (const ChunkKey& k : keys) out.append(KeyBytes(k));
  return out;
}

std::vector<uint32_t> ToTokens(py::handle tokens) {
  // A tensor or array gives its ids through tolist(); anything else is iterated.
  py::object seq = py::hasattr(tokens, "tolist") ? tokens.attr("tolist")()
                                                 : py::reinterpret_borrow<py::object>(tokens);
  std::vector<uint32_t> out;
  for (py::handle h : py::iterable(seq)) {
    if (!py::isinstance<py::int_>(h)) throw py::type_error("token ids are integers");
    const long long v = h.cast<long long>();
    if (v < 0 || v > UINT32_MAX) {
      throw py::value_error("token id " + std::to_string(v) + " is outside 0..4294967295");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

std::string ScopeText(const std::optional<std::string>& s, const char* what) {
  if (!s) return {};
  if (s->size() > kMaxScopeText) {
    throw py::value_error(std::string(what) + " is longer than 4096 bytes");
  }
  return *s;
}

// ---- memory of tensors and buffers -----------------------------------------------------------

bool IsTensor(py::handle h) {
  return py::hasattr(h, "data_ptr") && py::hasattr(h, "is_contiguous") && py::hasattr(h, "dtype");
}

std::string TensorDtype(py::handle t) { return py::str(t.attr("dtype")).cast<std::string>(); }

bool DtypeMatches(const std::string& torch_dtype, KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBf16:
      return torch_dtype == "torch.bfloat16";
    case KvDtype::kFp16:
      return torch_dtype == "torch.float16";
    case KvDtype::kFp32:
      return torch_dtype == "torch.float32";
    case KvDtype::kFp8:
      return torch_dtype == "torch.uint8" || torch_dtype == "torch.int8" ||
             torch_dtype.starts_with("torch.float8");
  }
  return false;
}

LayerRange ToRange(py::handle layers, const KvLayout& layout) {
  uint64_t first = 0, last = 0;
  if (py::isinstance<py::int_>(layers)) {
    first = 0;
    last = layers.cast<uint64_t>();
  } else {
    auto pair = layers.cast<std::pair<long long, long long>>();
    if (pair.first < 0 || pair.second < 0) throw py::value_error("layers are not negative");
    first = pair.first;
    last = pair.second;
  }
  if (first >= last || last > layout.num_layers) {
    throw py::value_error("layers [" + std::to_string(first) + ", " + std::to_string(last) +
                          ") are not inside the layout's " + std::to_string(layout.num_layers));
  }
  return {static_cast<uint32_t>(first), static_cast<uint32_t>(last)};
}

}  // namespace objectcache::python
