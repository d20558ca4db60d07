// `objectcache bench sched`: three multi-tenant workloads of concurrent layerwise retrievals
// from one `objectcache serve` whose bandwidth cap is shared by each policy in turn (equal,
// bytes, compute-aware), in the same run; per-request added TTFT of an emulated prefill.
// docs/scheduler.md has the rule; docs/engine.md the emulated engine and time dilation.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/ttft_experiment.h"
#include "engine/prefill.h"
#include "objectcache/client.h"
#include "sched/bandwidth_scheduler.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

struct SchedFlags {
  int repeats = 2;
  std::string gpu = "h100";
  std::string dir;                     // empty: a temporary directory (ScratchRoot)
  std::vector<std::string> workloads;  // empty: all
  double path_gbps = 0;                // > 0: take this as the path rate instead of measuring
  std::string json;
};

struct Request {
  uint64_t context;
  double hit;
  double arrival_ms;
};

struct Workload {
  std::string name;
  std::vector<Request> requests;
};

const std::vector<Workload>& Workloads() {
  static const std::vector<Workload> w = {
      // Six half-cached prompts at once: each could keep pace alone, together they cannot.
      {"crowd",
       {{4096, 0.5, 0},
        {4096, 0.5, 0},
        {6144, 0.5, 0},
        {6144, 0.5, 0},
        {8192, 0.5, 0},
        {8192, 0.5, 0}}},
      // A short prompt, a long one half cached, a long one mostly cached, at once: the one late
      // request finishes when all bytes are through under any work-conserving policy, so
      // compute-aware can gain little here (docs/scheduler.md).
      {"mixed", {{4096, 0.5, 0}, {16384, 0.5, 0}, {16384, 0.875, 0}}},
      {"burst", {{4096, 0.5, 0}, {4096, 0.875, 0}, {8192, 0.5, 0}, {8192, 0.875, 0}}},
      {"staggered",
       {{2048, 0.875, 0},
        {4096, 0.5, 40},
        {8192, 0.875, 80},
        {4096, 0.875, 120},
        {2048, 0.5, 160},
        {8192, 0.5, 200}}},
      {"long-and-short", {{16384, 0.875, 0}, {2048, 0.5, 20}, {2048, 0.5, 40}, {2048, 0.5, 60}}},
      // One mostly-cached prompt (little compute to hide its large transfer behind) arriving
      // with four long prompts that are barely cached (a small transfer behind long compute):
      // equal shares hand the four far more than they can use while the one stalls.
      {"hot-and-cool",
       {{8192, 0.875, 0},
        {32768, 0.125, 0},
        {32768, 0.125, 0},
        {32768, 0.125, 0},
        {32768, 0.125, 0}}},
      // Not in the default set: two small prompts, for the CI smoke test.
      {"smoke", {{2048, 0.5, 0}, {2048, 0.875, 10}}},
  };
  return w;
}

constexpr double kPaperLinkGbps = 100;
constexpr size_t kProbeStreams = 4;  // concurrent retrievals that measure the server path
const std::vector<double> kPaperCapsGbps = {80, 50};
const std::vector<sched::Policy> kPolicies = {sched::Policy::kEqual, sched::Policy::kBytes,
                                              sched::Policy::kComputeAware};

// One request of a workload: its prefix and what the engine computes.
struct Tenant {
  PrefixSet prefix;
  size_t chunks = 0;
  engine::PrefillPlan plan;
  double compute_per_layer = 0;
};

// Runs one workload against `endpoint`: each tenant arrives at its time, retrieves its prefix
// layerwise and prefills; returns each one's added TTFT (ms) over its compute alone.
Result<std::vector<double>> RunWorkload(const std::string& endpoint, const Workload& w,
                                        std::vector<Tenant>* tenants) {
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Create({.endpoints = {endpoint}, .bucket = "sched"}));
  std::vector<double> added(tenants->size());
  std::vector<Status> status(tenants->size());
  // Regions cleared before anyone arrives (clearing gigabytes while others run would steal
  // their CPU and show up as added TTFT).
  for (Tenant& t : *tenants) {
    t.prefix.ClearRegions(t.chunks);
  }
  std::vector<std::thread> threads;
  const double t0 = NowSeconds();
  for (size_t i = 0; i < tenants->size(); ++i) {
    threads.emplace_back([&, i] {
      Tenant& t = (*tenants)[i];
      std::this_thread::sleep_until(
          std::chrono::steady_clock::now() +
          std::chrono::duration<double>(t0 + w.requests[i].arrival_ms / 1e3 - NowSeconds()));
      LayerwiseRequest req = t.prefix.Request(t.chunks);
      req.compute_seconds_per_layer = t.compute_per_layer;
      const double start = NowSeconds();
      Result<std::unique_ptr<LayerwiseRetrieval>> retrieval =
          client->RetrieveLayerwise(std::move(req));
      if (!retrieval) {
        status[i] = retrieval.error();
        return;
      }
      engine::PrefillResult result =
          engine::RunPrefill(t.plan, [&](uint32_t l) { return (*retrieval)->WaitForLayer(l); });
      const double ttft = NowSeconds() - start;
      status[i] = result.status.ok() ? (*retrieval)->Wait() : result.status;
      if (status[i].ok()) status[i] = t.prefix.Check(t.chunks);
      added[i] = (ttft - t.compute_per_layer * t.plan.model.layers) * 1e3;
      if (std::getenv("OC_SCHED_DEBUG") && !result.stall_seconds.empty()) {
        double stall = 0;
        for (double x : result.stall_seconds) stall += x;
        std::fprintf(stderr, "  request %zu: layer0 %.1f ms, stalls %.1f ms, added %.1f ms\n", i,
                     result.stall_seconds[0] * 1e3, stall * 1e3, added[i]);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const Status& s : status) OC_RETURN_IF_ERROR(s);
  return added;
}

Status RunSched(const SchedFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset("llama-3.1-8b"));
  OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(model.name));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile gpu, engine::FindGpuProfile(f.gpu));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile h100, engine::FindGpuProfile("h100"));
  std::vector<Workload> workloads;
  for (const Workload& w : Workloads()) {
    if ((f.workloads.empty() && w.name != "smoke") ||
        std::find(f.workloads.begin(), f.workloads.end(), w.name) != f.workloads.end()) {
      workloads.push_back(w);
    }
  }
  if (workloads.empty()) {
    return InvalidArgumentError(
        "no such workload (crowd, mixed, burst, staggered, long-and-short, hot-and-cool, "
        "smoke)");
  }
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-sched"));
  const fs::path& root = scratch.path();

  // Store every tenant's prefix once; the servers of all policies share the store.
  std::vector<std::vector<Tenant>> tenants(workloads.size());
  double path_rate = 0;  // bytes/s of unpaced retrievals through the server
  {
    OC_ASSIGN_OR_RETURN(ServerChild server, StartServer(root, /*fresh=*/true));
    OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "sched", model));
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> writer,
                        Client::Create({.endpoints = {server.endpoint},
                                        .bucket = "sched",
                                        .write_behind_bytes = size_t{1} << 30}));
    uint64_t seed = 7;
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      for (const Request& r : workloads[wi].requests) {
        Tenant t;
        t.chunks = static_cast<size_t>(r.context * r.hit) / model.layout.tokens_per_chunk;
        OC_ASSIGN_OR_RETURN(t.prefix, StorePrefix(model, t.chunks, seed++, writer.get()));
        t.prefix.regions.clear();  // allocated when its workload runs
        tenants[wi].push_back(std::move(t));
      }
    }
    // What the server path carries with several tenants at once: the four largest prefixes
    // retrieved together, unpaced (the aggregate rate, as a multi-tenant workload sees it).
    std::vector<Tenant*> probes;
    for (auto& ws : tenants) {
      for (Tenant& t : ws) probes.push_back(&t);
    }
    std::sort(probes.begin(), probes.end(),
              [](const Tenant* a, const Tenant* b) { return a->chunks > b->chunks; });
    probes.resize(std::min<size_t>(probes.size(), kProbeStreams));
    uint64_t probe_bytes = 0;
    for (Tenant* t : probes) {
      t->prefix.AllocateRegions(t->chunks);
      probe_bytes += t->chunks * model.layout.ChunkKvBytes();
    }
    std::vector<double> rates;
    for (int i = 0; i < 3; ++i) {
      const double t0 = NowSeconds();
      std::vector<std::unique_ptr<LayerwiseRetrieval>> running;
      for (Tenant* t : probes) {
        OC_ASSIGN_OR_RETURN(auto retrieval,
                            writer->RetrieveLayerwise(t->prefix.Request(t->chunks)));
        running.push_back(std::move(retrieval));
      }
      for (auto& r : running) OC_RETURN_IF_ERROR(r->Wait());
      rates.push_back(static_cast<double>(probe_bytes) / (NowSeconds() - t0));
    }
    for (Tenant* t : probes) {
      OC_RETURN_IF_ERROR(t->prefix.Check(t->chunks));
      t->prefix.regions.clear();
    }
    const double link = f.path_gbps > 0 ? f.path_gbps * 1e9 / 8 : Median(rates);
    // Scale: this path stands for the paper's 100 Gbit/s link.
    const double dilation = PaperDilation(gpu, h100, link);
    std::printf(
        "server path: %.2f Gbit/s (%zu concurrent unpaced layerwise retrievals) stands for the "
        "paper's %.0f Gbit/s; compute x %.2f\n",
        link * 8 / 1e9, kProbeStreams, kPaperLinkGbps, dilation);
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      for (size_t i = 0; i < tenants[wi].size(); ++i) {
        Tenant& t = tenants[wi][i];
        const Request& r = workloads[wi].requests[i];
        t.plan = {.model = compute,
                  .gpu = gpu,
                  .cached_tokens = t.chunks * model.layout.tokens_per_chunk,
                  .new_tokens = r.context - t.chunks * model.layout.tokens_per_chunk,
                  .dilation = dilation};
        t.compute_per_layer = engine::LayerFlops(compute, t.plan.cached_tokens, t.plan.new_tokens) /
                              gpu.flops_per_second * dilation;
      }
    }
    path_rate = link;
  }  // the storing server and its client end here
  const double link = path_rate;

  Report report("sched");
  report.Param("gpu", f.gpu);
  report.Param("repeats", f.repeats);
  report.Metric("path_gbps", link * 8 / 1e9, "Gbit/s", "stands for the paper's 100 Gbit/s");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf("\n%-15s %-9s %-14s %12s %12s %10s  per request (ms)\n", "workload", "cap", "policy",
              "mean added", "p99 added", "vs equal");
  for (double paper_cap : kPaperCapsGbps) {
    const double cap = link * paper_cap / kPaperLinkGbps;
    char cap_arg[32];
    std::snprintf(cap_arg, sizeof(cap_arg), "%.0fB", cap);
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      for (Tenant& t : tenants[wi]) t.prefix.AllocateRegions(t.chunks);
      // Per policy, per request: the added TTFT of each repeat.
      std::map<sched::Policy, std::vector<std::vector<double>>> runs;
      for (int r = 0; r < f.repeats; ++r) {
        for (size_t k = 0; k < kPolicies.size(); ++k) {
          const sched::Policy policy = kPolicies[(k + r) % kPolicies.size()];
          OC_ASSIGN_OR_RETURN(ServerChild server,
                              StartServer(root, /*fresh=*/false,
                                          {"--bandwidth-cap", cap_arg, "--sched-policy",
                                           sched::PolicyName(policy)}));
          OC_ASSIGN_OR_RETURN(std::vector<double> added,
                              RunWorkload(server.endpoint, workloads[wi], &tenants[wi]));
          runs[policy].push_back(added);
        }
      }
      std::map<sched::Policy, double> mean;
      for (sched::Policy policy : kPolicies) {
        std::vector<double> per_request;
        for (size_t i = 0; i < tenants[wi].size(); ++i) {
          std::vector<double> v;
          for (const auto& run : runs[policy]) v.push_back(run[i]);
          per_request.push_back(Median(v));
        }
        double sum = 0;
        for (double a : per_request) sum += a;
        mean[policy] = sum / per_request.size();
        const double p99 = Percentile(per_request, 0.99);
        const double vs_equal = mean[sched::Policy::kEqual] / std::max(1e-3, mean[policy]);
        std::string list;
        for (double a : per_request) list += std::to_string(static_cast<int>(std::lround(a))) + " ";
        std::printf("%-15s %-9s %-14s %12.1f %12.1f %9.2fx  %s\n", workloads[wi].name.c_str(),
                    (std::to_string(static_cast<int>(paper_cap)) + "G").c_str(),
                    sched::PolicyName(policy), mean[policy], p99, vs_equal, list.c_str());
        rows.push_back({{"workload", workloads[wi].name},
                        {"cap_paper_gbps", paper_cap},
                        {"cap_gbps", cap * 8 / 1e9},
                        {"policy", sched::PolicyName(policy)},
                        {"mean_added_ms", mean[policy]},
                        {"p99_added_ms", p99},
                        {"ratio_vs_equal", vs_equal},
                        {"added_ms", per_request}});
      }
      const std::string tag =
          workloads[wi].name + "_" + std::to_string(static_cast<int>(paper_cap));
      report.Metric(
          "equal_over_compute_aware_" + tag,
          mean[sched::Policy::kEqual] / std::max(1e-3, mean[sched::Policy::kComputeAware]), "x",
          "mean added TTFT");
      report.Metric(
          "bytes_over_compute_aware_" + tag,
          mean[sched::Policy::kBytes] / std::max(1e-3, mean[sched::Policy::kComputeAware]), "x",
          "mean added TTFT");
      for (Tenant& t : tenants[wi]) t.prefix.regions.clear();
    }
  }
  report.Print();
  std::error_code ec;
  fs::remove_all(root / "store", ec);
  return report.WriteJson(f.json, std::move(rows));
}

}  // namespace

void AddSchedBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<SchedFlags>();
  CLI::App* s = AddBench(
      bench, "sched",
      "Bandwidth scheduling: three multi-tenant workloads under caps standing for 80 and 50 "
      "Gbit/s, each under the equal, bytes and compute-aware policies; added TTFT per request",
      f, RunSched);
  s->add_option("--repeats,--rounds", f->repeats, "Runs per policy, interleaved");
  AddGpuProfile(s, &f->gpu);
  s->add_option("--workload", f->workloads,
                "crowd, mixed, burst, staggered, long-and-short, hot-and-cool (default: these), "
                "smoke")
      ->delimiter(',');
  s->add_option("--path-gbps", f->path_gbps,
                "Take this as what the server path carries (default: measure 4 concurrent "
                "unpaced retrievals); the caps and the time dilation scale with it")
      ->default_str("");
  AddScratchDir(s, &f->dir);
}

}  // namespace objectcache::bench
