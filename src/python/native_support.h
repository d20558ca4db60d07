// What the parts of objectcache._native share: errors raised as objectcache.Error, keys, layer
// ranges and modes read from Python, and torch dtypes (docs/python.md).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/client.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"

namespace objectcache::python {

namespace py = pybind11;

// Text fields of the key namespace are bounded: a salt or an adapter name is short.
inline constexpr size_t kMaxScopeText = 4096;

// objectcache.Error, created at import.
extern PyObject* g_error_type;

// Raises objectcache.Error with .code (the status code's name) and .message.
[[noreturn]] void Raise(const Status& s);
void Check(const Status& s);

// The value of a result, or raises its error. Takes a named result (GCC 12 sees a moved-from
// temporary std::expected as maybe uninitialized).
template <typename T>
T Take(Result<T>& r) {
  if (!r) Raise(r.error());
  return std::move(*r);
}

// Runs `call`, a blocking call into the library that touches no Python object, with the GIL
// released; its Status or Result.
template <typename F>
auto Released(F&& call) {
  py::gil_scoped_release release;
  return call();
}

// Check and Take for calls whose InvalidArgument is the caller's mistake: that one is raised
// as ValueError, every other error as objectcache.Error.
void CheckArgument(const Status& s);
template <typename T>
T TakeArgument(Result<T>& r) {
  if (!r) CheckArgument(r.error());
  return std::move(*r);
}

// The value of a result, or ValueError with its message (bad arguments, not cache errors).
template <typename T>
T OrValueError(Result<T> r) {
  if (!r) throw py::value_error(r.error().message());
  return std::move(*r);
}

ChunkKey ToKey(py::handle h);
std::vector<ChunkKey> ToKeys(py::iterable keys);
py::bytes KeyBytes(const ChunkKey& k);
py::list KeyList(const std::vector<ChunkKey>& keys);
std::vector<uint32_t> ToTokens(py::handle tokens);
// A Python int `h` (or a numpy or torch integer) in 0..max. TypeError if it is no integer; else
// ValueError "WHAT VALUE is outside RANGE" (the value cut to 40 digits) for any other value, -1
// and 2**64 included.
uint64_t IntInRange(py::handle h, uint64_t max, const std::string& what, const std::string& range);
std::string ScopeText(const std::optional<std::string>& s, const char* what);

// A contiguous run of host memory and the Python object that owns it.
struct Region {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  uint64_t first_dim = 0;  // the leading dimension (blocks of a paged cache); 0 for a buffer
  std::shared_ptr<py::buffer_info> view;  // a buffer object's export (none for a tensor)
};

bool IsTensor(py::handle h);
std::string TensorDtype(py::handle t);
// The torch dtypes whose elements are the layout's: fp8 may be any one-byte type.
bool DtypeMatches(const std::string& torch_dtype, KvDtype dtype);

// A count (layers 0..n-1) or a (first, last) pair inside the layout; ValueError otherwise.
LayerRange ToRange(py::handle layers, const KvLayout& layout);

}  // namespace objectcache::python
