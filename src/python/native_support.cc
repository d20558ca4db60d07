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
    out.push_back(static_cast<uint32_t>(IntInRange(h, UINT32_MAX, "token id", "0..4294967295")));
  }
  return out;
}

uint64_t IntInRange(py::handle h, uint64_t max, const std::string& what, const std::string& range) {
  // An int, or what stands for one (__index__: a numpy or torch integer).
  if (!PyIndex_Check(h.ptr())) {
    throw py::type_error(what + " must be an integer, not " +
                         std::string(py::str(h.get_type().attr("__name__"))));
  }
  const py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow == 0 && v >= 0 && static_cast<unsigned long long>(v) <= max) {
    return static_cast<uint64_t>(v);
  }
  if (overflow > 0) {  // past 2**63 - 1: up to 2**64 - 1 it is still a u64
    const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();  // past 2**64 - 1 too: refused below
    } else if (u <= max) {
      return static_cast<uint64_t>(u);
    }
  }
  std::string text = py::str(i);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  throw py::value_error(what + " " + text + " is outside " + range);
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
  const std::string range = "the layout's 0.." + std::to_string(layout.num_layers);
  if (py::isinstance<py::int_>(layers)) {
    last = IntInRange(layers, layout.num_layers, "layers", range);
  } else if (py::isinstance<py::sequence>(layers) && !py::isinstance<py::str>(layers) &&
             !py::isinstance<py::bytes>(layers) && py::len(layers) == 2) {
    first = IntInRange(layers[py::int_(0)], layout.num_layers, "first layer", range);
    last = IntInRange(layers[py::int_(1)], layout.num_layers, "last layer", range);
  } else {
    throw py::type_error("layers must be a count or a (first, last) pair");
  }
  if (first >= last) {
    throw py::value_error("layers [" + std::to_string(first) + ", " + std::to_string(last) +
                          ") are not inside the layout's " + std::to_string(layout.num_layers));
  }
  return {static_cast<uint32_t>(first), static_cast<uint32_t>(last)};
}

}  // namespace objectcache::python
