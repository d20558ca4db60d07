// `objectcache bench backends --ceph DIR`: on the single-node Ceph that scripts/ceph-dev started
// in DIR, in one run, interleaved: Ceph's own S3 gateway (radosgw) read the way LMCache and
// NIXL read object stores today (a GET per chunk; a ranged GET per chunk per layer) against
// `objectcache serve` over RADOS with aggregated layerwise retrieval, and against our gateway
// over the local store. Throughput of whole prefixes and the TTFT of an emulated prefill with
// half the prompt cached; every byte received is checked against what was stored. Beside them,
// the cluster's own rate for the same objects: read whole through librados as `rados bench seq`
// reads (16 in flight), the ceiling of any gateway over it. Then gateways as a fleet: several
// retrievals at once through one of our gateways, and through two over the same pool.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/ttft_experiment.h"
#include "engine/prefill.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
#include "objectcache/store_registry.h"
#include "store/rados/rados_store.h"
#include "store/s3/s3_store.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

struct BackendsFlags {
  std::string ceph_dir;
  std::vector<uint64_t> contexts = {4096, 16384};
  int repeats = 3;
  double hit = 0.5;
  int parallel = 8;
  bool no_ttft = false;
  int fleet_readers = 4;  // concurrent retrievals of the gateway-fleet run; 0: no fleet run
  std::string gpu = "h100";
  std::string layerwise_window;  // our RADOS gateway's --layerwise-window; empty: its default
  std::string dir;               // empty: a temporary directory (ScratchRoot)
  std::string json;
};

// One way of reading a prefix: a gateway and a retrieval mode.
struct ReadPath {
  std::string name;     // "radosgw S3-LW"
  std::string backend;  // "radosgw", "objectcache/rados", "objectcache/local"
  RetrievalMode mode;
  Client* client;
};

// The radosgw S3-LW path is what the others are compared with.
constexpr char kBaseline[] = "radosgw S3-LW";
constexpr uint32_t kGranularity = 16;
constexpr char kBucket[] = "bench-backends";
constexpr int kRadosBenchInFlight = 16;  // `rados bench`'s default
constexpr char kSeq[] = "librados seq (16)";

// "4k" for 4096 tokens, "300" for 300: TokensTag as metric names spell it.
std::string ContextTag(uint64_t tokens) {
  std::string tag = TokensTag(tokens);
  if (tag.back() == 'K') tag.back() = 'k';
  return tag;
}

// The CPU seconds used so far by each process of the run: this one (the client) and the
// cluster's and gateways' processes, everything a read costs on the machine.
class RunCpu {
 public:
  struct Process {
    std::string name;
    pid_t pid;  // 0: this process; -1: not found (counts nothing)
  };
  explicit RunCpu(std::vector<Process> processes) : processes_(std::move(processes)) {}
  std::vector<double> Now() const {
    std::vector<double> s;
    for (const Process& p : processes_) {
      s.push_back(p.pid == 0 ? CpuSeconds(RUSAGE_SELF) : p.pid > 0 ? ProcessCpuSeconds(p.pid) : 0);
    }
    return s;
  }
  // Per GiB of `bytes`, each process's CPU between `before` and `after`, and their "total".
  std::map<std::string, double> PerGiB(const std::vector<double>& before,
                                       const std::vector<double>& after, double bytes) const {
    std::map<std::string, double> out;
    double total = 0;
    for (size_t i = 0; i < processes_.size(); ++i) {
      out[processes_[i].name] = (after[i] - before[i]) / (bytes / kGiB);
      total += out[processes_[i].name];
    }
    out["total"] = total;
    return out;
  }

 private:
  std::vector<Process> processes_;
};

// What one timed read took: wall seconds, and CPU seconds per GiB of each process in the run.
struct Timed {
  double seconds = 0;
  std::map<std::string, double> cpu_per_gib;
};

// Reads the first `chunks` chunks of every layer in `mode`, checking every byte afterwards.
Result<Timed> TimeRetrieval(Client* client, RetrievalMode mode, PrefixSet* p, size_t chunks,
                            const RunCpu& cpu) {
  p->ClearRegions(chunks);
  const double t0 = NowSeconds();
  const std::vector<double> c0 = cpu.Now();
  OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> retrieval,
                      p->StartRetrieval(client, mode, chunks));
  OC_RETURN_IF_ERROR(retrieval->Wait());
  const double seconds = NowSeconds() - t0;
  const Timed t{seconds, cpu.PerGiB(c0, cpu.Now(),
                                    static_cast<double>(chunks) * p->model.layout.ChunkKvBytes())};
  OC_RETURN_IF_ERROR(p->CheckRetrieved(*retrieval, chunks));
  return t;
}

// `into.size()` aggregated layerwise retrievals of the first `chunks` chunks through `client` at
// once, each into its own regions (cleared first, outside the timing), every byte checked
// afterwards; the seconds until the last ended.
Result<Timed> TimeConcurrentRetrievals(Client* client, PrefixSet* p,
                                       std::vector<std::vector<PageBuffer>>* into, size_t chunks,
                                       const RunCpu& cpu) {
  const uint64_t slice = p->model.layout.LayerSliceBytes();
  for (std::vector<PageBuffer>& regions : *into) {
    for (PageBuffer& r : regions) std::memset(r.data(), 0, chunks * slice);
  }
  const double t0 = NowSeconds();
  const std::vector<double> c0 = cpu.Now();
  std::vector<std::unique_ptr<LayerwiseRetrieval>> retrievals;
  for (std::vector<PageBuffer>& regions : *into) {
    LayerwiseRequest req = p->Request(chunks);
    req.mode = RetrievalMode::kAggregatedLayerwise;
    for (size_t l = 0; l < regions.size(); ++l) req.regions[l] = regions[l].bytes();
    OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> r,
                        client->RetrieveLayerwise(std::move(req)));
    retrievals.push_back(std::move(r));
  }
  for (auto& r : retrievals) OC_RETURN_IF_ERROR(r->Wait());
  const double seconds = NowSeconds() - t0;
  const double bytes = static_cast<double>(into->size() * chunks) * p->model.layout.ChunkKvBytes();
  const Timed t{seconds, cpu.PerGiB(c0, cpu.Now(), bytes)};
  for (size_t i = 0; i < into->size(); ++i) {
    OC_ASSIGN_OR_RETURN(uint32_t hits, retrievals[i]->Hits());
    if (hits != chunks) {
      return DataLossError("a fleet reader got " + std::to_string(hits) + " hits of " +
                           std::to_string(chunks));
    }
    OC_RETURN_IF_ERROR(p->CheckRegions((*into)[i], chunks));
  }
  return t;
}

// The median of each process's CPU seconds per GiB ("total" left out), as a JSON object.
nlohmann::ordered_json MediansByProcess(const std::map<std::string, std::vector<double>>& cpu) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [process, v] : cpu) {
    if (process != "total") j[process] = Median(v);
  }
  return j;
}

// DIR/pid/NAME as scripts/ceph-dev writes it; -1 when absent.
pid_t CephDaemonPid(const std::string& dir, const char* name) {
  std::ifstream in(fs::path(dir) / "pid" / name);
  long pid = -1;
  in >> pid;
  return static_cast<pid_t>(pid);
}

// Gateways as a fleet: `--fleet-readers` aggregated layerwise retrievals of the shortest context
// at once through a client given one gateway, then through one given both (keys spread over
// them), interleaved; the aggregate rate and the gateways' CPU per GiB.
Status RunFleet(const BackendsFlags& f, PrefixSet* prefix,
                const std::array<std::string, 2>& gateways, const RunCpu& run_cpu,
                const std::function<Result<std::unique_ptr<Client>>(const std::vector<std::string>&,
                                                                    uint64_t)>& client_for,
                Report* report, nlohmann::ordered_json* rows) {
  const uint64_t context = *std::min_element(f.contexts.begin(), f.contexts.end());
  const size_t chunks = context / kGranularity;
  const KvLayout& layout = prefix->model.layout;
  OC_ASSIGN_OR_RETURN(auto one, client_for({gateways[0]}, 0));
  OC_ASSIGN_OR_RETURN(auto both, client_for({gateways[0], gateways[1]}, 0));
  std::vector<std::vector<PageBuffer>> into;
  for (int i = 0; i < f.fleet_readers; ++i) {
    into.push_back(MakeRegions(layout.num_layers, chunks * layout.LayerSliceBytes()));
  }
  struct Fleet {
    std::string name;
    Client* client;
  };
  const std::array<Fleet, 2> fleets = {Fleet{"fleet: 1 gateway", one.get()},
                                       Fleet{"fleet: 2 gateways", both.get()}};
  std::map<std::string, std::vector<double>> seconds;
  std::map<std::string, std::map<std::string, std::vector<double>>> cpu_per_gib;
  for (int r = 0; r < f.repeats; ++r) {
    for (size_t k = 0; k < fleets.size(); ++k) {
      const Fleet& fleet = fleets[(k + r) % fleets.size()];
      OC_ASSIGN_OR_RETURN(Timed t,
                          TimeConcurrentRetrievals(fleet.client, prefix, &into, chunks, run_cpu));
      seconds[fleet.name].push_back(t.seconds);
      for (const auto& [process, c] : t.cpu_per_gib) cpu_per_gib[fleet.name][process].push_back(c);
    }
  }
  const double bytes = static_cast<double>(into.size() * chunks) * layout.ChunkKvBytes();
  std::array<double, 2> gbps{}, gateway_cpu{};
  std::printf("\n%-6s %-22s %9s %10s %14s  (%d readers at once, S3Agg-LW)\n", "ctx", "path",
              "Gbit/s", "vs 1 gw", "gateways s/GiB", f.fleet_readers);
  for (size_t i = 0; i < fleets.size(); ++i) {
    const std::string& name = fleets[i].name;
    gbps[i] = bytes * 8 / Median(seconds[name]) / 1e9;
    nlohmann::ordered_json by_process = MediansByProcess(cpu_per_gib[name]);
    gateway_cpu[i] = by_process["ours/rados gateway"].get<double>() +
                     by_process["ours/rados gateway 2"].get<double>();
    std::printf("%-6s %-22s %9.2f %9.2fx %14.2f\n", ContextTag(context).c_str(), name.c_str(),
                gbps[i], gbps[i] / gbps[0], gateway_cpu[i]);
    rows->push_back({{"context", context},
                     {"path", name},
                     {"backend", "objectcache/rados"},
                     {"mode", RetrievalModeName(RetrievalMode::kAggregatedLayerwise)},
                     {"gateways", i + 1},
                     {"readers", f.fleet_readers},
                     {"gbps", gbps[i]},
                     {"ratio_vs_1_gateway", gbps[i] / gbps[0]},
                     {"gateways_cpu_s_per_gib", gateway_cpu[i]},
                     {"cpu_s_per_gib", Median(cpu_per_gib[name]["total"])},
                     {"cpu_s_per_gib_by_process", by_process}});
  }
  const std::string readers =
      std::to_string(f.fleet_readers) + " retrievals of " + ContextTag(context) + " tokens at once";
  report->Metric("fleet_gbps_1_gateway", gbps[0], "Gbit/s", readers);
  report->Metric("fleet_gbps_2_gateways", gbps[1], "Gbit/s", readers + ", keys over both");
  report->Metric("fleet_ratio_2_vs_1", gbps[1] / gbps[0], "x", "");
  report->Metric("fleet_gateways_cpu_s_per_gib_1", gateway_cpu[0], "s/GiB", "");
  report->Metric("fleet_gateways_cpu_s_per_gib_2", gateway_cpu[1], "s/GiB", "both gateways");
  return Status();
}

Status RunBackends(const BackendsFlags& f) {
  if (f.ceph_dir.empty()) return InvalidArgumentError("--ceph DIR is required");
  if (f.repeats < 1) return InvalidArgumentError("--repeats must be at least 1");
  if (!(f.hit > 0 && f.hit < 1)) return InvalidArgumentError("--hit lies in (0, 1)");
  if (f.parallel < 1) return InvalidArgumentError("--parallel must be at least 1");
  if (f.fleet_readers < 0 || f.fleet_readers > 64) {
    return InvalidArgumentError("--fleet-readers lies in [0, 64]");
  }
  for (uint64_t c : f.contexts) {
    if (c < 2 * kGranularity) return InvalidArgumentError("contexts are at least 32 tokens");
  }
  OC_ASSIGN_OR_RETURN(auto env, ReadCephEnv(f.ceph_dir));
  // One set of credentials for every request: radosgw checks them; our gateways run
  // anonymous and take signed requests too.
  ::setenv("OBJECTCACHE_ACCESS_KEY", env["RGW_ACCESS_KEY"].c_str(), 1);
  ::setenv("OBJECTCACHE_SECRET_KEY", env["RGW_SECRET_KEY"].c_str(), 1);

  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset("llama-3.1-8b"));
  model.layout.tokens_per_chunk = kGranularity;
  OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(model.name));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile gpu, engine::FindGpuProfile(f.gpu));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile h100, engine::FindGpuProfile("h100"));

  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-backends"));
  const fs::path& root = scratch.path();
  // Our RADOS gateway's store; the librados reader below opens the same.
  const std::string rados_uri = env["RADOS_URI"] + "&namespace=" + kBucket;
  std::vector<std::string> rados_args = {"--store", rados_uri};
  if (!f.layerwise_window.empty()) {
    rados_args.insert(rados_args.end(),
                      {"--layerwise-window", f.layerwise_window, "--request-memory", "4GiB"});
  }
  OC_ASSIGN_OR_RETURN(ServerChild rados_gw,
                      StartServer(root / "rados-gateway", /*fresh=*/true, rados_args));
  // A second gateway over the same pool and namespace: the fleet run's.
  OC_ASSIGN_OR_RETURN(ServerChild rados_gw2,
                      StartServer(root / "rados-gateway-2", /*fresh=*/true, rados_args));
  OC_ASSIGN_OR_RETURN(ServerChild local_gw, StartServer(root / "local-gateway", /*fresh=*/true));
  const std::string rgw = env["RGW_ENDPOINT"];
  for (const std::string& endpoint :
       {rgw, rados_gw.endpoint, rados_gw2.endpoint, local_gw.endpoint}) {
    OC_RETURN_IF_ERROR(CreateBucket(endpoint, kBucket, model));
  }

  size_t max_chunks = 0;
  for (uint64_t c : f.contexts) max_chunks = std::max<size_t>(max_chunks, c / kGranularity);
  const uint64_t object_bytes = ChunkGeometry(model.layout, ChunkKey()).ObjectBytes();
  auto client_for = [&](const std::vector<std::string>& endpoints, uint64_t dram_bytes) {
    return Client::Create({.endpoints = endpoints,
                           .bucket = kBucket,
                           .timeout = std::chrono::seconds(120),
                           .parallel_requests = f.parallel,
                           .write_behind_bytes = (max_chunks + 1) * object_bytes,
                           .dram_tier_bytes = dram_bytes});
  };
  // The local gateway's writer keeps every chunk in its DRAM tier: the TTFT baseline.
  OC_ASSIGN_OR_RETURN(auto local_writer,
                      client_for({local_gw.endpoint}, (max_chunks + 1) * object_bytes));
  OC_ASSIGN_OR_RETURN(auto rados_writer, client_for({rados_gw.endpoint}, 0));
  OC_ASSIGN_OR_RETURN(auto rgw_store,
                      OpenS3Store("s3://" + rgw.substr(rgw.find("://") + 3) + "/" + kBucket));
  const double t_store = NowSeconds();
  OC_ASSIGN_OR_RETURN(PrefixSet prefix,
                      StorePrefix(model, max_chunks, 7,
                                  {ClientSink(local_writer.get()), ClientSink(rados_writer.get()),
                                   StoreSink(rgw_store.get())}));
  std::printf(
      "stored a %zu-token Llama-3.1-8B prefix (%zu chunks of %.1f MiB) in each of "
      "radosgw, objectcache/rados and objectcache/local in %.1f s\n",
      max_chunks * kGranularity, max_chunks, object_bytes / 1048576.0, NowSeconds() - t_store);

  OC_ASSIGN_OR_RETURN(auto rgw_reader, client_for({rgw}, 0));
  OC_ASSIGN_OR_RETURN(auto rados_reader, client_for({rados_gw.endpoint}, 0));
  OC_ASSIGN_OR_RETURN(auto local_reader, client_for({local_gw.endpoint}, 0));
  // The objects our RADOS gateway stored, as it names them (docs/object-format.md).
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> rados, OpenStore(rados_uri));
  std::vector<std::string> rados_names;
  for (const ChunkKey& key : prefix.keys) rados_names.push_back(kBucket + ("/" + key.ToHex()));
  const std::vector<ReadPath> paths = {
      {"radosgw S3-CW", "radosgw", RetrievalMode::kPlainChunkwise, rgw_reader.get()},
      {kBaseline, "radosgw", RetrievalMode::kPlainLayerwise, rgw_reader.get()},
      {"ours/rados S3-LW", "objectcache/rados", RetrievalMode::kPlainLayerwise, rados_reader.get()},
      {"ours/rados S3Agg-LW", "objectcache/rados", RetrievalMode::kAggregatedLayerwise,
       rados_reader.get()},
      {"ours/local S3Agg-LW", "objectcache/local", RetrievalMode::kAggregatedLayerwise,
       local_reader.get()},
  };

  double dilation = 1;
  if (!f.no_ttft) {
    const double link = MeasureLoopbackBytesPerSecond(1.0);
    if (link <= 0) return UnavailableError("could not measure the loopback link");
    dilation = PaperDilation(gpu, h100, link);
    std::printf(
        "link: one TCP stream over loopback %.2f Gbit/s; TTFT compute x %.2f (paper "
        "testbed, docs/engine.md)\n",
        link * 8 / 1e9, dilation);
  }

  Report report("backends");
  report.Param("model", model.name);
  report.Param("granularity", kGranularity);
  report.Param("repeats", f.repeats);
  report.Param("parallel_requests", f.parallel);
  report.Param("ttft_hit", f.hit);
  report.Param("dilation", dilation);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  // Every process of the run, for the CPU per GiB each path costs the machine.
  const RunCpu run_cpu({{"client", 0},
                        {"ours/rados gateway", rados_gw.process->pid()},
                        {"ours/rados gateway 2", rados_gw2.process->pid()},
                        {"ours/local gateway", local_gw.process->pid()},
                        {"ceph-osd", CephDaemonPid(f.ceph_dir, "osd.0")},
                        {"radosgw", CephDaemonPid(f.ceph_dir, "rgw")},
                        {"ceph-mon", CephDaemonPid(f.ceph_dir, "mon.a")}});
  std::printf("\n%-6s %-22s %9s %10s %10s %10s %11s %8s\n", "ctx", "path", "Gbit/s", "vs radosgw",
              "ttft ms", "added ms", "ttft vs rgw", "cpu s/GiB");
  for (uint64_t context : f.contexts) {
    const size_t chunks = context / kGranularity;
    const double bytes = static_cast<double>(chunks) * model.layout.ChunkKvBytes();
    // Throughput: whole prefixes, the paths (and the librados read, kSeq) in a rotating order
    // each repeat. The CPU of every process per GiB delivered, for each.
    std::map<std::string, std::vector<double>> seconds;
    // path -> process (or "total") -> CPU seconds per GiB, one a repeat.
    std::map<std::string, std::map<std::string, std::vector<double>>> cpu_per_gib;
    auto cpu_by_process = [&](const std::string& path) {
      return MediansByProcess(cpu_per_gib[path]);
    };
    std::vector<double> rados_seq_gbps;
    for (int r = 0; r < f.repeats; ++r) {
      for (size_t k = 0; k <= paths.size(); ++k) {
        const size_t at = (k + r) % (paths.size() + 1);
        if (at == paths.size()) {
          // The whole objects: layers and headers, slightly more than `bytes`.
          const std::vector<double> c0 = run_cpu.Now();
          OC_ASSIGN_OR_RETURN(
              RadosSequentialRead seq,
              ReadRadosObjectsSequentially(*rados, std::span(rados_names).first(chunks),
                                           kRadosBenchInFlight));
          for (const auto& [process, c] :
               run_cpu.PerGiB(c0, run_cpu.Now(), static_cast<double>(seq.bytes))) {
            cpu_per_gib[kSeq][process].push_back(c);
          }
          rados_seq_gbps.push_back(static_cast<double>(seq.bytes) * 8 / seq.seconds / 1e9);
          continue;
        }
        const ReadPath& p = paths[at];
        OC_ASSIGN_OR_RETURN(Timed t, TimeRetrieval(p.client, p.mode, &prefix, chunks, run_cpu));
        seconds[p.name].push_back(t.seconds);
        for (const auto& [process, c] : t.cpu_per_gib) cpu_per_gib[p.name][process].push_back(c);
      }
    }
    // TTFT: the first `hit` of the prompt cached, the rest computed.
    std::map<std::string, std::vector<double>> ttft;
    const size_t cached = static_cast<size_t>(context * f.hit) / kGranularity;
    if (!f.no_ttft && cached > 0) {
      const engine::PrefillPlan plan{.model = compute,
                                     .gpu = gpu,
                                     .cached_tokens = cached * kGranularity,
                                     .new_tokens = context - cached * kGranularity,
                                     .dilation = dilation};
      std::vector<ReadPath> with_base = paths;
      with_base.push_back(
          {"Local-DRAM-LW", "dram", RetrievalMode::kAggregatedLayerwise, local_writer.get()});
      for (int r = 0; r < f.repeats; ++r) {
        for (size_t k = 0; k < with_base.size(); ++k) {
          const ReadPath& p = with_base[(k + r) % with_base.size()];
          OC_ASSIGN_OR_RETURN(PrefillRun run,
                              RunPrefillOnce(p.client, p.mode, &prefix, cached, plan));
          ttft[p.name].push_back(run.ttft_ms);
        }
      }
    }
    // The wait before a prefill can start: the first layer of the cached chunks. Read by
    // librados alone (the store's ranged reads of those slices, up to 256 in flight, no
    // gateway, no HTTP), and through our gateway over RADOS (request to layer 0 in place and
    // checked), interleaved. With one object per chunk every reader needs one read operation per
    // cached chunk before the first layer is whole, so the first is a floor under the TTFT that
    // any reader of these objects adds on this cluster.
    std::vector<double> floor_ms, first_ms;
    if (!f.no_ttft && cached > 0) {
      const uint64_t slice = model.layout.LayerSliceBytes();
      const uint64_t offset = ChunkGeometry(model.layout, ChunkKey()).LayerOffset(0);
      PageBuffer dest(cached * slice);
      for (int r = 0; r < f.repeats; ++r) {
        std::vector<RangeRead> reads(cached);
        for (size_t i = 0; i < cached; ++i) {
          reads[i] = {.key = rados_names[i],
                      .offset = offset,
                      .dest = dest.bytes().subspan(i * slice, slice)};
        }
        HeldMemory held;
        const double t0 = NowSeconds();
        OC_RETURN_IF_ERROR(rados->RetrieveRangesInPlace(reads, &held));
        floor_ms.push_back((NowSeconds() - t0) * 1000);
        for (size_t i = 0; i < cached; ++i) {
          OC_RETURN_IF_ERROR(reads[i].status);
          if (LayerChecksum(reads[i].data) != prefix.checksums[i * model.layout.num_layers]) {
            return DataLossError("librados read another first layer of chunk " + std::to_string(i));
          }
        }
        prefix.ClearRegions(cached);
        const double t1 = NowSeconds();
        OC_ASSIGN_OR_RETURN(
            std::unique_ptr<LayerwiseRetrieval> retrieval,
            prefix.StartRetrieval(rados_reader.get(), RetrievalMode::kAggregatedLayerwise, cached));
        OC_RETURN_IF_ERROR(retrieval->WaitForLayer(0));
        first_ms.push_back((NowSeconds() - t1) * 1000);
        OC_RETURN_IF_ERROR(retrieval->Wait());
        OC_RETURN_IF_ERROR(prefix.CheckRetrieved(*retrieval, cached));
      }
    }
    const double base_gbps = bytes * 8 / Median(seconds[kBaseline]) / 1e9;
    const double base_ttft = Median(ttft["Local-DRAM-LW"]);
    const double rgw_ttft = Median(ttft[kBaseline]);
    for (const ReadPath& p : paths) {
      const double gbps = bytes * 8 / Median(seconds[p.name]) / 1e9;
      const double t = Median(ttft[p.name]);
      nlohmann::ordered_json row = {{"context", context},
                                    {"path", p.name},
                                    {"backend", p.backend},
                                    {"mode", RetrievalModeName(p.mode)},
                                    {"gbps", gbps},
                                    {"ratio_vs_radosgw", gbps / base_gbps},
                                    {"cpu_s_per_gib", Median(cpu_per_gib[p.name]["total"])},
                                    {"cpu_s_per_gib_by_process", cpu_by_process(p.name)}};
      if (!f.no_ttft) {
        row["ttft_ms"] = t;
        row["added_ms"] = t - base_ttft;
        row["ttft_ratio_vs_radosgw"] = rgw_ttft / t;
      }
      std::printf("%-6s %-22s %9.2f %9.2fx %10.1f %10.1f %10.2fx %8.2f\n",
                  ContextTag(context).c_str(), p.name.c_str(), gbps, gbps / base_gbps, t,
                  t - base_ttft, f.no_ttft ? 0.0 : rgw_ttft / t,
                  Median(cpu_per_gib[p.name]["total"]));
      rows.push_back(row);
    }
    const std::string tag = ContextTag(context);
    const double agg_gbps = bytes * 8 / Median(seconds["ours/rados S3Agg-LW"]) / 1e9;
    const double cw_gbps = bytes * 8 / Median(seconds["radosgw S3-CW"]) / 1e9;
    const double seq_gbps = Median(rados_seq_gbps);
    const double seq_cpu = Median(cpu_per_gib[kSeq]["total"]);
    std::printf("%-6s %-22s %9.2f %9.2fx %43.2f\n", tag.c_str(), kSeq, seq_gbps,
                seq_gbps / base_gbps, seq_cpu);
    rows.push_back({{"context", context},
                    {"path", kSeq},
                    {"backend", "rados"},
                    {"mode", "whole objects, 16 in flight"},
                    {"gbps", seq_gbps},
                    {"ratio_vs_radosgw", seq_gbps / base_gbps},
                    {"cpu_s_per_gib", seq_cpu},
                    {"cpu_s_per_gib_by_process", cpu_by_process(kSeq)}});
    // Were our gateway free, a read over RADOS would still cost the machine what the librados
    // read costs (the OSD, and librados receiving) plus what a read from our gateway over the
    // local store costs (sending and receiving through the gateway: an overestimate by the
    // local store's own reads, an underestimate by the one copy out of librados's buffers).
    // With every core busy, that bounds the rate on this machine.
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double ceiling_gbps =
        cores / (seq_cpu + Median(cpu_per_gib["ours/local S3Agg-LW"]["total"])) * kGiB * 8 / 1e9;
    report.Metric("gbps_radosgw_lw_" + tag, base_gbps, "Gbit/s", "radosgw, ranged GET per layer");
    report.Metric("gbps_rados_agg_lw_" + tag, agg_gbps, "Gbit/s", "ours over RADOS, S3Agg-LW");
    report.Metric("ratio_vs_radosgw_" + tag, agg_gbps / base_gbps, "x", "target >= 5x at G=16");
    report.Metric("rados_seq_gbps_" + tag, seq_gbps, "Gbit/s",
                  "the same objects whole through librados, 16 in flight");
    report.Metric("agg_lw_vs_radosgw_cw_" + tag, agg_gbps / cw_gbps, "x", "target >= 2x");
    report.Metric("agg_lw_vs_rados_seq_" + tag, agg_gbps / seq_gbps, "x", "target >= 0.8x");
    report.Metric("rados_agg_lw_ceiling_gbps_" + tag, ceiling_gbps, "Gbit/s",
                  "cores / (CPU-s per GiB of librados seq + of ours/local S3Agg-LW)");
    report.Metric("rados_agg_lw_cpu_s_per_gib_" + tag,
                  Median(cpu_per_gib["ours/rados S3Agg-LW"]["total"]), "s/GiB",
                  "every process of the run");
    // The gateway's own CPU against radosgw's for the same objects and layers.
    const double gw_cpu = Median(cpu_per_gib["ours/rados S3Agg-LW"]["ours/rados gateway"]);
    const double rgw_cpu = Median(cpu_per_gib[kBaseline]["radosgw"]);
    report.Metric("gateway_cpu_s_per_gib_" + tag, gw_cpu, "s/GiB",
                  "our gateway's process, ours/rados S3Agg-LW");
    report.Metric("radosgw_cpu_s_per_gib_" + tag, rgw_cpu, "s/GiB",
                  "radosgw's process, radosgw S3-LW, the same objects");
    report.Metric("gateway_cpu_ratio_vs_radosgw_" + tag, gw_cpu / rgw_cpu, "x", "");
    if (!f.no_ttft) {
      report.Metric("ttft_ms_local_dram_" + tag, base_ttft, "ms", "baseline");
      report.Metric("ttft_ms_radosgw_lw_" + tag, rgw_ttft, "ms");
      const double agg_ttft = Median(ttft["ours/rados S3Agg-LW"]);
      report.Metric("ttft_ms_rados_agg_lw_" + tag, agg_ttft, "ms");
      report.Metric("rados_agg_lw_added_pct_" + tag, (agg_ttft - base_ttft) / base_ttft * 100, "%",
                    "TTFT added over the local DRAM tier; target <= 5 at 16K");
      if (!floor_ms.empty()) {
        const std::string n = std::to_string(cached);
        report.Metric("rados_first_layer_floor_ms_" + tag, Median(floor_ms), "ms",
                      "librados alone: the first layer of the " + n + " cached chunks");
        report.Metric("rados_first_layer_floor_pct_" + tag, Median(floor_ms) / base_ttft * 100, "%",
                      "that floor against the baseline TTFT");
        report.Metric("rados_agg_lw_first_layer_ms_" + tag, Median(first_ms), "ms",
                      "ours over RADOS: request to the first layer in place");
      }
    }
  }
  if (f.fleet_readers > 0) {
    OC_RETURN_IF_ERROR(RunFleet(f, &prefix, {rados_gw.endpoint, rados_gw2.endpoint}, run_cpu,
                                client_for, &report, &rows));
  }
  std::printf("\n");
  report.Print();
  return report.WriteJson(f.json, std::move(rows));
}

}  // namespace

void AddBackendsBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<BackendsFlags>();
  CLI::App* s = AddBench(
      bench, "backends",
      "On a Ceph cluster from scripts/ceph-dev: radosgw read with plain S3 (GET per chunk, "
      "ranged GET per chunk per layer) against objectcache serve over RADOS and over the "
      "local store with aggregated layerwise retrieval; throughput and TTFT, every byte checked",
      f, RunBackends);
  s->add_option("--ceph", f->ceph_dir, "The cluster's directory (scripts/ceph-dev start DIR)")
      ->required();
  s->add_option("--context", f->contexts, "Prompt lengths in tokens (Llama-3.1-8B, G=16)")
      ->delimiter(',');
  s->add_option("--repeats,--rounds", f->repeats, "Runs per path, interleaved");
  s->add_option("--hit", f->hit, "Cached share of the prompt in the TTFT runs");
  s->add_option("--parallel", f->parallel, "Concurrent requests of the plain S3 paths");
  s->add_flag("--no-ttft", f->no_ttft, "Throughput only");
  s->add_option("--fleet-readers", f->fleet_readers,
                "Retrievals at once in the gateway-fleet run (one gateway, then two over the "
                "same pool; the shortest context); 0: no fleet run");
  AddGpuProfile(s, &f->gpu);
  s->add_option("--layerwise-window", f->layerwise_window,
                "Our RADOS gateway's serve --layerwise-window (with --request-memory 4GiB); "
                "default: serve's own");
  s->add_option(
      "--dir", f->dir,
      "Scratch directory for our local gateway's store (default: a temporary one, removed)");
}

}  // namespace objectcache::bench
