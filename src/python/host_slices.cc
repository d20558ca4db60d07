#include "python/host_slices.h"

#include <pybind11/stl.h>

#include <set>
#include <string>

namespace objectcache::python {

Region ToRegion(py::handle obj, const KvLayout& layout, bool writable, const char* what) {
  Region r;
  if (IsTensor(obj)) {
    const std::string device = py::str(obj.attr("device").attr("type")).cast<std::string>();
    if (device != "cpu") {
      throw py::value_error(std::string(what) + " is on " + device +
                            ": this call takes CPU tensors; retrieve_to_device and "
                            "save_from_device take CUDA ones (docs/gpu.md)");
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      throw py::value_error(std::string(what) + " is not contiguous");
    }
    const std::string dtype = TensorDtype(obj);
    if (!DtypeMatches(dtype, layout.dtype)) {
      throw py::type_error(std::string(what) + " is " + dtype + " but the layout's dtype is " +
                           std::string(KvDtypeName(layout.dtype)));
    }
    if (writable && obj.attr("requires_grad").cast<bool>()) {
      throw py::value_error(std::string(what) + " requires grad; pass a tensor without it");
    }
    r.data = reinterpret_cast<std::byte*>(obj.attr("data_ptr")().cast<uintptr_t>());
    r.bytes = obj.attr("numel")().cast<uint64_t>() * obj.attr("element_size")().cast<uint64_t>();
    const py::tuple shape = obj.attr("shape");
    r.first_dim = shape.empty() ? 0 : shape[0].cast<uint64_t>();
    return r;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(std::string(what) + " is neither a torch tensor nor a buffer");
  }
  auto view = std::make_shared<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request());
  py::buffer_info& info = *view;
  // C-contiguous: every stride is the product of the later dimensions.
  int64_t expect = info.itemsize;
  for (ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) {
      throw py::value_error(std::string(what) + " is not contiguous");
    }
    expect *= info.shape[d];
  }
  if (info.readonly && writable) throw py::value_error(std::string(what) + " is read-only");
  r.data = static_cast<std::byte*>(info.ptr);
  r.view = std::move(view);
  r.bytes = static_cast<uint64_t>(info.size) * info.itemsize;
  r.first_dim = info.ndim > 0 ? info.shape[0] : 0;
  return r;
}

SliceMap MapSlices(py::handle layers_obj, size_t chunks, const KvLayout& layout, size_t expect,
                   const std::optional<py::iterable>& block_table, bool writable) {
  SliceMap map;
  SliceAddresses& m = *map.at;
  m.slice = layout.LayerSliceBytes();
  py::list list;
  if (py::isinstance<py::str>(layers_obj)) {
    throw py::type_error("layers are given as a list of tensors or buffers, not text");
  }
  if (IsTensor(layers_obj) || PyObject_CheckBuffer(layers_obj.ptr())) {
    list.append(layers_obj);  // one layer given alone
  } else {
    for (py::handle h : py::iterable(py::reinterpret_borrow<py::object>(layers_obj))) {
      list.append(h);
    }
  }
  if (list.size() != expect) {
    throw py::value_error("expected " + std::to_string(expect) + " layer tensors, got " +
                          std::to_string(list.size()));
  }
  if (block_table) {
    std::set<uint64_t> seen;
    for (py::handle h : *block_table) {
      const uint64_t b = IntInRange(h, INT64_MAX, "block", "0..2**63-1");
      if (!seen.insert(b).second) {
        throw py::value_error("block " + std::to_string(b) + " is named twice in the block table");
      }
      m.blocks.push_back(static_cast<uint64_t>(b));
    }
    if (m.blocks.size() < chunks) {
      throw py::value_error("the block table names " + std::to_string(m.blocks.size()) +
                            " blocks for " + std::to_string(chunks) + " chunks");
    }
    m.blocks.resize(chunks);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string what = "layer tensor " + std::to_string(i);
    Region r = ToRegion(list[i], layout, writable, what.c_str());
    if (!m.blocks.empty()) {
      // A paged cache: [num_blocks, ...] with one chunk's slice per block.
      if (r.first_dim == 0 || r.bytes / r.first_dim != m.slice || r.bytes % r.first_dim != 0) {
        throw py::value_error(what + ": a block must hold one layer slice (" +
                              std::to_string(m.slice) +
                              " bytes: block_size = tokens_per_chunk, the layout's heads and dim)");
      }
      for (uint64_t b : m.blocks) {
        if (b >= r.first_dim) {
          throw py::value_error("block " + std::to_string(b) + " is outside " + what + " (" +
                                std::to_string(r.first_dim) + " blocks)");
        }
      }
    } else if (r.bytes / m.slice < chunks) {
      throw py::value_error(what + " holds " + std::to_string(r.bytes) + " bytes; " +
                            std::to_string(chunks) + " chunks need " +
                            std::to_string(chunks * m.slice));
    }
    m.layers.push_back(r);
    map.owners.append(list[i]);
    if (r.view) map.views.push_back(std::move(r.view));
  }
  return map;
}

}  // namespace objectcache::python
