// `objectcache bench evict --ceph DIR`: the RADOS evictor (src/store/rados/rados_capacity.h) on
// the single-node Ceph that scripts/ceph-dev started in DIR. Two gateways (two stores over one
// namespace, as two servers would be) write 4x the capacity; usage is sampled over time; then
// how fast the evictor brings the namespace back under its bound (evict_ops_per_s) and what
// capacity costs a writer: PUT throughput with capacity against the same writes without it,
// interleaved (put_ratio_capacity).
#include <atomic>
#include <filesystem>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "objectcache/store_registry.h"

namespace objectcache::bench {
namespace {

struct EvictBenchFlags {
  std::string ceph_dir;
  std::string capacity = "32MiB";
  std::string object = "256KiB";
  int writers = 4;
  int rounds = 3;
  std::string json;
};

std::string Uri(const EvictBenchFlags& f, const std::string& ns, uint64_t capacity) {
  std::string uri = "rados://objectcache?conf=" + f.ceph_dir + "/ceph.conf&namespace=" + ns;
  if (capacity > 0) uri += "&capacity=" + std::to_string(capacity) + "&evict_interval_ms=100";
  return uri;
}

// `writers` threads put `objects` objects in turn through the gateways; objects/s.
double WriteStorm(const std::vector<Store*>& gateways, int writers, uint64_t objects,
                  const std::string& body, const std::string& prefix, std::atomic<int>* failures) {
  std::atomic<uint64_t> next{0};
  const double t0 = NowSeconds();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i; (i = next++) < objects;) {
        if (!gateways[w % gateways.size()]->Put(prefix + std::to_string(i), AsBytes(body)).ok()) {
          (*failures)++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return static_cast<double>(objects) / (NowSeconds() - t0);
}

uint64_t ListedBytes(Store& store) {
  uint64_t bytes = 0;
  (void)ForEachObject(store, "", [&](const ObjectInfo& o) { bytes += o.size; });
  return bytes;
}

Status RunEvictBench(const EvictBenchFlags& f) {
  if (f.ceph_dir.empty()) return InvalidArgumentError("--ceph DIR is required");
  OC_ASSIGN_OR_RETURN(const uint64_t capacity, ParseByteSize(f.capacity));
  OC_ASSIGN_OR_RETURN(const uint64_t object, ParseByteSize(f.object));
  if (object == 0 || capacity < 4 * object) {
    return InvalidArgumentError("--capacity must hold at least 4 objects");
  }
  const uint64_t objects = 4 * capacity / object;
  const std::string body(object, 'e');
  const std::string run = "bench-evict-" + std::to_string(::getpid());

  Report report("evict");
  report.Param("capacity", f.capacity);
  report.Param("object", f.object);
  report.Param("writers", f.writers);
  report.Param("gateways", 2);
  report.Param("storm", "4x the capacity, " + std::to_string(objects) + " objects");
  std::atomic<int> failures{0};

  // The storm, with usage sampled every 100 ms until it is back under the bound.
  OC_ASSIGN_OR_RETURN(auto a, OpenStore(Uri(f, run + "-storm", capacity)));
  OC_ASSIGN_OR_RETURN(auto b, OpenStore(Uri(f, run + "-storm", capacity)));
  nlohmann::ordered_json timeline = nlohmann::ordered_json::array();
  std::atomic<bool> sampling{true};
  const double start = NowSeconds();
  std::thread sampler([&] {
    while (sampling) {
      timeline.push_back({{"t_s", NowSeconds() - start},
                          {"usage_mib", static_cast<double>(a->Usage().bytes) / (1 << 20)}});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const double storm_rate =
      WriteStorm({a.get(), b.get()}, f.writers, objects, body, "storm-", &failures);
  const double storm_end = NowSeconds();
  const uint64_t evicted_at_end = a->Usage().evictions + b->Usage().evictions;
  while (a->Usage().bytes > capacity && NowSeconds() - storm_end < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double drained_s = NowSeconds() - storm_end;
  sampling = false;
  sampler.join();
  const uint64_t evictions = a->Usage().evictions + b->Usage().evictions;
  const double storm_seconds = storm_end - start;
  const double evict_rate =
      static_cast<double>(evictions) / (storm_seconds + drained_s);  // over the whole episode
  const uint64_t listed = ListedBytes(*a);
  std::printf("\nstorm: %llu objects at %.0f/s; %llu evicted (%llu after the storm, in %.2f s)\n",
              static_cast<unsigned long long>(objects), storm_rate,
              static_cast<unsigned long long>(evictions),
              static_cast<unsigned long long>(evictions - evicted_at_end), drained_s);

  // What capacity costs a writer: the same PUTs with and without it, interleaved.
  std::vector<double> with, without;
  for (int r = 0; r < f.rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool capped = (r + k) % 2 == 0;
      const std::string ns = run + "-cost-" + std::to_string(r) + (capped ? "-capped" : "-plain");
      OC_ASSIGN_OR_RETURN(auto g, OpenStore(Uri(f, ns, capped ? capacity : 0)));
      const double rate =
          WriteStorm({g.get()}, f.writers, capacity / object, body, "cost-", &failures);
      (capped ? with : without).push_back(rate);
      (void)ForEachObject(*g, "", [&](const ObjectInfo& o) { (void)g->Delete(o.key); });
    }
  }
  // Leave the cluster as it was.
  (void)ForEachObject(*a, "", [&](const ObjectInfo& o) { (void)a->Delete(o.key); });

  report.Metric("evict_ops_per_s", evict_rate, "1/s",
                "objects evicted per second from the storm's start until under the bound");
  report.Metric("drain_s", drained_s, "s", "from the storm's end until usage is under the bound");
  report.Metric("final_usage_ratio", static_cast<double>(listed) / capacity, "x",
                "listed bytes / capacity after the drain (<= 1)");
  report.Metric("put_ratio_capacity", Median(with) / Median(without), "x",
                "PUT/s with capacity on / without (usage accounting, access times)");
  report.Metric("errors", failures.load(), "", "failed PUTs");
  report.Print();
  nlohmann::ordered_json j = report.ToJson();
  j["rows"] = timeline;
  OC_RETURN_IF_ERROR(WriteJsonFile(f.json, j));
  if (failures > 0) return InternalError(std::to_string(failures.load()) + " PUTs failed");
  if (listed > capacity) return InternalError("usage stayed over the capacity");
  return Status();
}

}  // namespace

void AddEvictBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<EvictBenchFlags>();
  CLI::App* e =
      AddBench(bench, "evict",
               "The RADOS evictor: a 4x write storm from two gateways, usage over time, its cost",
               f, RunEvictBench);
  e->add_option("--ceph", f->ceph_dir, "Directory of a cluster started by scripts/ceph-dev")
      ->required();
  e->add_option("--capacity", f->capacity, "Namespace capacity");
  e->add_option("--object", f->object, "Object size");
  e->add_option("--writers", f->writers, "Writer threads");
  e->add_option("--rounds,--repeats", f->rounds, "Cost runs per side (interleaved)");
}

}  // namespace objectcache::bench
