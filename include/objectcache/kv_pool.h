// Elastic KV memory (src/mem, docs/kv-pool.md): a pool that reserves a large virtual range up
// front and maps physical pages into it only as blocks are used, so several models or tenants
// share one GPU or host without static partitions (the idea of kvcached).
//
//   PageBackend     reserves address space and maps / unmaps physical pages in it: host (a
//                   PROT_NONE range backed page by page from a memfd) or CUDA (cuMemAddress-
//                   Reserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease).
//   PhysicalBudget  the physical bytes several pools may map together.
//   ElasticPool     fixed-size blocks carved from pages. A background thread maps pages ahead
//                   of demand and unmaps wholly free ones beyond a band of warm spares; the
//                   allocation fast path takes blocks from mapped pages under a short lock and
//                   never makes a system call. Allocation is all-or-nothing.
//   BlockTable      logical block ids -> physical blocks, so blocks can move (compaction) while
//                   consumers keep their ids; it can name the destination of every chunk slice
//                   of a layerwise retrieval.
//
// All classes are thread-safe unless a method says otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "objectcache/status.h"

namespace objectcache {

inline constexpr uint64_t kDefaultPageBytes = 2 << 20;

// Physical pages at fixed places in a reserved virtual range. Not thread-safe: the pool calls
// it from its mapping thread (and its destructor) only.
class PageBackend {
 public:
  virtual ~PageBackend() = default;
  virtual std::string name() const = 0;
  virtual uint64_t page_bytes() const = 0;
  // Whether the CPU can read and write mapped pages (host: yes; CUDA: device memory, no).
  virtual bool host_accessible() const = 0;
  // Reserves `bytes` of address space with no memory behind it. InvalidArgument unless `bytes`
  // is a positive multiple of page_bytes().
  virtual Result<std::byte*> Reserve(uint64_t bytes) = 0;
  // Backs page `index` of the range at `base` with physical memory, readable and writable,
  // already faulted in. Unmap gives the memory back to the OS (or the driver).
  // REQUIRES: `base` came from Reserve and the page lies inside that reservation; Map only an
  // unmapped page, Unmap only a mapped one.
  virtual Status Map(std::byte* base, uint64_t index) = 0;
  virtual Status Unmap(std::byte* base, uint64_t index) = 0;
  // REQUIRES: `base` and `bytes` are exactly a Reserve's; no page of it is still mapped.
  virtual void Release(std::byte* base, uint64_t bytes) = 0;
  // Copies within memory of this backend (memcpy on the host, cuMemcpy on a device).
  // REQUIRES: both ranges lie in mapped pages of this backend and do not overlap.
  virtual Status Copy(std::byte* dst, const std::byte* src, uint64_t bytes) = 0;
};

struct HostBackendOptions {
  uint64_t page_bytes = kDefaultPageBytes;
  // Register each mapped page with the CUDA driver for fast DMA (cuMemHostRegister) when this
  // build has CUDA and a GPU is present; silently off otherwise.
  bool register_for_device = false;
};
Result<std::unique_ptr<PageBackend>> NewHostPageBackend(HostBackendOptions options = {});

// Unavailable when no GPU can be used (no driver, no device): every build has this backend.
// page_bytes 0: the device's allocation granularity (2 MiB on current GPUs).
Result<std::unique_ptr<PageBackend>> NewCudaPageBackend(int device = 0, uint64_t page_bytes = 0);
// Whether NewCudaPageBackend can succeed here (a CUDA driver and a GPU present).
bool CudaAvailable();

// Physical bytes shared by several pools: a pool takes a page's bytes before mapping it and
// gives them back after unmapping it.
class PhysicalBudget {
 public:
  explicit PhysicalBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` if used() + bytes stays within limit(); false (and nothing taken) otherwise.
  bool TryTake(uint64_t bytes);
  // REQUIRES: `bytes` were taken by TryTake and not given back yet.
  void Give(uint64_t bytes);
  // Lowering it below what is in use takes nothing back: it takes effect as pages are given.
  void SetLimit(uint64_t bytes);
  uint64_t used() const;
  uint64_t limit() const;

 private:
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> limit_;
};

struct ElasticPoolOptions {
  std::string name = "kv";
  uint64_t reserve_bytes = uint64_t{64} << 30;  // virtual range; the most this pool can ever map
  uint64_t block_bytes = 64 << 10;              // divides the page size
  uint64_t limit_bytes = UINT64_MAX;            // physical bytes this pool may map (SetLimit)
  // Hysteresis: the mapping thread keeps at least min_spare_pages' worth of free mapped blocks
  // ready, and unmaps wholly free pages beyond max_spare_pages of them.
  uint32_t min_spare_pages = 1;
  uint32_t max_spare_pages = 4;
  PhysicalBudget* budget = nullptr;  // shared by pools; must outlive this pool; null: none
};

struct ElasticPoolStats {
  uint64_t mapped_pages = 0, used_blocks = 0, free_mapped_blocks = 0;
  uint64_t maps = 0, unmaps = 0;              // page operations since creation
  double map_seconds = 0, unmap_seconds = 0;  // their total time
  uint64_t limit_bytes = 0;
};

using BlockId = uint32_t;

class ElasticPool {
 public:
  // InvalidArgument unless: a backend is given, block_bytes divides its page size (at most 2^20
  // blocks a page), reserve_bytes holds at least one page and at most 2^32 blocks, and
  // min_spare_pages <= max_spare_pages. A reservation that is not a whole number of pages is
  // rounded down. REQUIRES: options.budget, when set, outlives the pool.
  static Result<std::unique_ptr<ElasticPool>> Create(std::unique_ptr<PageBackend> backend,
                                                     ElasticPoolOptions options);
  virtual ~ElasticPool() = default;  // stops the mapping thread, unmaps, releases the range

  // `n` blocks, all or none: waits up to `wait` for the mapping thread to map pages;
  // ResourceExhausted when the limit, the budget or the reservation cannot hold them.
  virtual Result<std::vector<BlockId>> Allocate(
      size_t n, std::chrono::milliseconds wait = std::chrono::seconds(5)) = 0;
  // REQUIRES: each block was allocated by this pool and is not freed yet (a block freed twice
  // would be handed out twice).
  virtual void Free(std::span<const BlockId> blocks) = 0;
  // The block's address (device memory for a CUDA pool). Valid while it is allocated.
  // REQUIRES: `block` is allocated from this pool.
  virtual std::byte* Address(BlockId block) const = 0;
  // Changes the physical limit now; free pages above it are unmapped by the mapping thread.
  virtual void SetLimit(uint64_t bytes) = 0;
  // Blocks until the mapping thread has nothing left to do (tests, benchmarks).
  virtual void Settle() = 0;
  virtual ElasticPoolStats Stats() const = 0;
  virtual uint64_t block_bytes() const = 0;
  virtual uint64_t page_bytes() const = 0;
  virtual PageBackend& backend() = 0;
};

using LogicalBlock = uint32_t;

// Logical block ids over an ElasticPool. Address() is valid until the next Compact();
// Compact() must not run while anyone uses addresses (it moves blocks).
class BlockTable {
 public:
  // REQUIRES: `pool` outlives the table; the table frees its live blocks when destroyed.
  explicit BlockTable(ElasticPool* pool) : pool_(pool) {}
  ~BlockTable();

  // `n` logical blocks, all or none, as ElasticPool::Allocate (whose errors it returns).
  Result<std::vector<LogicalBlock>> Allocate(size_t n);
  // Ids that are not live (never allocated, or freed already) are ignored.
  void Free(std::span<const LogicalBlock> blocks);
  // REQUIRES (both): `block` is live in this table.
  std::byte* Address(LogicalBlock block) const;
  BlockId Physical(LogicalBlock block) const;
  // Moves live blocks out of the highest pages into free blocks of lower ones (copying their
  // bytes), so whole pages fall free for the pool to unmap. Returns how many moved.
  // REQUIRES: no one reads or writes through an address taken before the call.
  Result<size_t> Compact();
  size_t live() const;

 private:
  ElasticPool* pool_;
  mutable std::mutex mu_;
  std::vector<BlockId> physical_;    // guarded by mu_: by logical id
  std::vector<bool> live_;           // guarded by mu_
  std::vector<LogicalBlock> spare_;  // guarded by mu_: freed logical ids
};

}  // namespace objectcache
