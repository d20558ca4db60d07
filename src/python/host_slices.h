// Host memory from Python for the client: a torch CPU tensor or any buffer-protocol object
// checked and seen as a Region, and the layer tensors of a retrieval or a save mapped to where
// each chunk's slice of each layer lies (back to back, or in the blocks of a paged cache).
// Part of objectcache._native (objectcache_native.cc); CUDA tensors go through
// device_binding.h.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "objectcache/kv_layout.h"
#include "python/native_support.h"

namespace objectcache::python {

// `obj` as host memory: a contiguous CPU tensor of the layout's dtype (without grad where it is
// written), or a C-contiguous buffer (writable where it is written). TypeError or ValueError
// naming `what` otherwise.
Region ToRegion(py::handle obj, const KvLayout& layout, bool writable, const char* what);

// Where each chunk's slice of each layer of a range is: one region per layer, either holding
// the chunks' slices back to back, or (with a block table) a paged cache whose block
// block_table[j] is chunk j's slice.
// The addresses alone hold no Python object, so the retrieval's threads may copy and drop them
// without the GIL.
struct SliceAddresses {
  std::vector<Region> layers;    // one per layer of the range
  std::vector<uint64_t> blocks;  // empty: back to back
  uint64_t slice = 0;

  std::byte* At(size_t layer_index, size_t chunk) const {
    const uint64_t index = blocks.empty() ? chunk : blocks[chunk];
    return layers[layer_index].data + index * slice;
  }
};

struct SliceMap {
  std::shared_ptr<SliceAddresses> at = std::make_shared<SliceAddresses>();
  py::list owners;  // the objects whose memory this is
  // Their buffer exports, held as long as the memory is written: a bytearray cannot be resized
  // (BufferError) while a retrieval may write into it.
  std::vector<std::shared_ptr<py::buffer_info>> views;
};

// The `expect` layer tensors of `layers_obj` (a list, or one tensor or buffer alone) for
// `chunks` chunks: back to back, or in the blocks `block_table` names (one a chunk, each named
// once, inside every tensor). TypeError or ValueError before anything is written otherwise.
SliceMap MapSlices(py::handle layers_obj, size_t chunks, const KvLayout& layout, size_t expect,
                   const std::optional<py::iterable>& block_table, bool writable);

}  // namespace objectcache::python
