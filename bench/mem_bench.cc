// `objectcache bench mem`: the elastic KV pool (include/objectcache/kv_pool.h) against a
// statically preallocated pool of the same size: page map/unmap cost, block allocation
// throughput with two threads, and memory given back to the OS after a burst.
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "objectcache/kv_pool.h"

namespace objectcache::bench {
namespace {

struct MemFlags {
  uint64_t burst_mib = 1024;
  uint64_t block_kib = 64;
  double seconds = 1.0;
  int pages = 256;
  std::string json;
};

uint64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// The baseline: one populated region carved into blocks, a free stack under a mutex.
class StaticPool {
 public:
  StaticPool(uint64_t bytes, uint64_t block) : bytes_(bytes), block_(block) {
    base_ = static_cast<std::byte*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    for (uint64_t i = bytes / block; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  }
  ~StaticPool() { ::munmap(base_, bytes_); }
  bool ok() const { return base_ != MAP_FAILED; }
  bool Allocate(size_t n, std::vector<uint32_t>* out) {
    std::lock_guard lock(mu_);
    if (free_.size() < n) return false;
    out->assign(free_.end() - static_cast<long>(n), free_.end());
    free_.resize(free_.size() - n);
    return true;
  }
  void Free(const std::vector<uint32_t>& blocks) {
    std::lock_guard lock(mu_);
    free_.insert(free_.end(), blocks.begin(), blocks.end());
  }
  std::byte* Address(uint32_t b) const { return base_ + uint64_t{b} * block_; }

 private:
  uint64_t bytes_, block_;
  std::byte* base_;
  std::mutex mu_;
  std::vector<uint32_t> free_;
};

// Allocations of one block then frees, from two threads for `seconds`: operations per second.
template <typename Alloc, typename Free>
double TwoThreadOps(double seconds, Alloc alloc, Free free) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  auto loop = [&] {
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 64; ++i) {
        free(alloc());
        n++;
      }
    }
    ops += n;
  };
  const double t0 = NowSeconds();
  std::thread a(loop), b(loop);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  a.join();
  b.join();
  return ops / (NowSeconds() - t0);
}

// Map then unmap `pages` pages of `backend`: mean microseconds per page for each.
Status PageCosts(PageBackend& backend, int pages, double* map_us, double* unmap_us) {
  const uint64_t p = backend.page_bytes();
  OC_ASSIGN_OR_RETURN(std::byte * base, backend.Reserve(pages * p));
  double t0 = NowSeconds();
  for (int i = 0; i < pages; ++i) OC_RETURN_IF_ERROR(backend.Map(base, i));
  *map_us = (NowSeconds() - t0) * 1e6 / pages;
  t0 = NowSeconds();
  for (int i = 0; i < pages; ++i) OC_RETURN_IF_ERROR(backend.Unmap(base, i));
  *unmap_us = (NowSeconds() - t0) * 1e6 / pages;
  backend.Release(base, pages * p);
  return Status();
}

Status RunMem(const MemFlags& f) {
  const uint64_t block = f.block_kib << 10;
  const uint64_t burst = f.burst_mib << 20;
  Report report("mem");
  report.Param("burst_mib", f.burst_mib);
  report.Param("block_kib", f.block_kib);
  report.Param("page_bytes", kDefaultPageBytes);

  // 1. Page costs.
  {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<PageBackend> host, NewHostPageBackend());
    double map_us = 0, unmap_us = 0;
    OC_RETURN_IF_ERROR(PageCosts(*host, f.pages, &map_us, &unmap_us));
    report.Metric("host_map_us", map_us, "us", "per 2 MiB page, memory faulted in (MAP_POPULATE)");
    report.Metric("host_unmap_us", unmap_us, "us", "per page, memory returned (punch hole)");
    if (CudaAvailable()) {
      OC_ASSIGN_OR_RETURN(std::unique_ptr<PageBackend> gpu, NewCudaPageBackend());
      OC_RETURN_IF_ERROR(PageCosts(*gpu, f.pages, &map_us, &unmap_us));
      report.Metric("cuda_map_us", map_us, "us", "cuMemCreate + cuMemMap + cuMemSetAccess");
      report.Metric("cuda_unmap_us", unmap_us, "us", "cuMemUnmap + cuMemRelease");
    }
  }

  // 2. Allocation throughput, two threads, pages already mapped (the fast path).
  {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<ElasticPool> pool,
                        ElasticPool::Create(*NewHostPageBackend(), {.reserve_bytes = burst,
                                                                    .block_bytes = block,
                                                                    .min_spare_pages = 2,
                                                                    .max_spare_pages = 8}));
    pool->Settle();
    StaticPool fixed(burst, block);
    if (!fixed.ok()) return ResourceExhaustedError("could not map the static pool");
    double elastic_ops = 0, static_ops = 0;
    std::vector<double> e, s;
    for (int round = 0; round < 3; ++round) {  // interleaved
      e.push_back(TwoThreadOps(
          f.seconds / 3, [&] { return *pool->Allocate(1); },
          [&](std::vector<BlockId> b) { pool->Free(b); }));
      s.push_back(TwoThreadOps(
          f.seconds / 3,
          [&] {
            std::vector<uint32_t> b;
            fixed.Allocate(1, &b);
            return b;
          },
          [&](const std::vector<uint32_t>& b) { fixed.Free(b); }));
    }
    elastic_ops = Median(e);
    static_ops = Median(s);
    report.Metric("elastic_alloc_free_mops", elastic_ops / 1e6, "M/s", "2 threads, 1 block each");
    report.Metric("static_alloc_free_mops", static_ops / 1e6, "M/s", "mutex free stack, same use");
    report.Metric("alloc_ratio", elastic_ops / static_ops, "x", "elastic / static");
  }

  // 3. A burst: fill `burst` bytes of blocks, touch them, free them all.
  {
    const uint64_t n = burst / block;
    const uint64_t before = RssBytes();
    OC_ASSIGN_OR_RETURN(std::unique_ptr<ElasticPool> pool,
                        ElasticPool::Create(*NewHostPageBackend(),
                                            {.reserve_bytes = 2 * burst, .block_bytes = block}));
    OC_ASSIGN_OR_RETURN(std::vector<BlockId> blocks, pool->Allocate(n, std::chrono::seconds(60)));
    for (BlockId b : blocks) std::memset(pool->Address(b), 1, block);
    const uint64_t peak = RssBytes();
    pool->Free(blocks);
    pool->Settle();
    const uint64_t after = RssBytes();
    const ElasticPoolStats st = pool->Stats();
    report.Metric("elastic_rss_before_mib", before / 1048576.0, "MiB");
    report.Metric("elastic_rss_peak_mib", peak / 1048576.0, "MiB");
    report.Metric("elastic_rss_after_mib", after / 1048576.0, "MiB",
                  std::to_string(st.mapped_pages) + " warm spare pages kept");
    report.Metric("elastic_page_map_us_in_pool", st.maps ? st.map_seconds * 1e6 / st.maps : 0, "us",
                  "on the mapping thread, never on the allocating one");
  }
  {
    const uint64_t before = RssBytes();
    StaticPool fixed(burst, block);
    std::vector<uint32_t> blocks;
    fixed.Allocate(burst / block, &blocks);
    for (uint32_t b : blocks) std::memset(fixed.Address(b), 1, block);
    const uint64_t peak = RssBytes();
    fixed.Free(blocks);
    const uint64_t after = RssBytes();
    report.Metric("static_rss_before_mib", before / 1048576.0, "MiB");
    report.Metric("static_rss_peak_mib", peak / 1048576.0, "MiB");
    report.Metric("static_rss_after_mib", after / 1048576.0, "MiB", "all of it stays");
  }
  report.Print();
  return report.WriteJson(f.json);
}

}  // namespace

void AddMemBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<MemFlags>();
  CLI::App* m =
      AddBench(bench, "mem",
               "Elastic KV pool vs a static preallocated pool: page map/unmap cost, 2-thread "
               "allocation throughput, memory returned after a burst (CUDA numbers with a GPU)",
               f, RunMem);
  m->add_option("--burst-mib", f->burst_mib, "Burst size");
  m->add_option("--block-kib", f->block_kib, "Block size");
  m->add_option("--seconds", f->seconds, "Time for the throughput runs");
  m->add_option("--pages", f->pages, "Pages for the map/unmap costs");
}

}  // namespace objectcache::bench
