// `objectcache bench backends --ceph DIR`: on the single-node Ceph that scripts/ceph-dev started
// in DIR, in one run, interleaved: Ceph's own S3 gateway (radosgw) read the way LMCache and
// NIXL read object stores today (a GET per chunk; a ranged GET per chunk per layer) against
// `objectcache serve` over RADOS with aggregated layerwise retrieval, and against our gateway
// over the local store. Throughput of whole prefixes and the TTFT of an emulated prefill with
// half the prompt cached; every byte received is checked against what was stored.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/ttft_experiment.h"
#include "engine/prefill.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
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
  bool ttft = true;
  std::string gpu = "h100";
  std::string dir;  // empty: a temporary directory (ScratchRoot)
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

// DIR/env as written by scripts/ceph-dev: NAME=VALUE lines, values maybe single-quoted.
Result<std::map<std::string, std::string>> ReadCephEnv(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "env");
  if (!in) {
    return NotFoundError("no cluster settings in " + dir +
                         "/env: start one with scripts/ceph-dev start " + dir);
  }
  std::map<std::string, std::string> env;
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') {
      value = value.substr(1, value.size() - 2);
    }
    env[line.substr(0, eq)] = value;
  }
  for (const char* key : {"RADOS_URI", "RGW_ENDPOINT", "RGW_ACCESS_KEY", "RGW_SECRET_KEY"}) {
    if (!env.contains(key)) return InvalidArgumentError(dir + "/env lacks " + key);
  }
  return env;
}

// "4k" for 4096 tokens, "300" for 300.
std::string ContextTag(uint64_t tokens) {
  return tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "k" : std::to_string(tokens);
}

// Reads the first `chunks` chunks of every layer in `mode`; seconds, after checking every byte.
Result<double> TimeRetrieval(Client* client, RetrievalMode mode, PrefixSet* p, size_t chunks) {
  p->ClearRegions(chunks);
  const double t0 = NowSeconds();
  OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> retrieval,
                      p->StartRetrieval(client, mode, chunks));
  OC_RETURN_IF_ERROR(retrieval->Wait());
  const double seconds = NowSeconds() - t0;
  OC_RETURN_IF_ERROR(p->CheckRetrieved(*retrieval, chunks));
  return seconds;
}

Status RunBackends(const BackendsFlags& f) {
  if (f.ceph_dir.empty()) return InvalidArgumentError("--ceph DIR is required");
  if (f.repeats < 1) return InvalidArgumentError("--repeats must be at least 1");
  if (!(f.hit > 0 && f.hit < 1)) return InvalidArgumentError("--hit lies in (0, 1)");
  if (f.parallel < 1) return InvalidArgumentError("--parallel must be at least 1");
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
  OC_ASSIGN_OR_RETURN(ServerChild rados_gw,
                      StartServer(root / "rados-gateway", /*fresh=*/true,
                                  {"--store", env["RADOS_URI"] + "&namespace=bench-backends"}));
  OC_ASSIGN_OR_RETURN(ServerChild local_gw, StartServer(root / "local-gateway", /*fresh=*/true));
  const std::string rgw = env["RGW_ENDPOINT"];
  for (const std::string& endpoint : {rgw, rados_gw.endpoint, local_gw.endpoint}) {
    OC_RETURN_IF_ERROR(CreateBucket(endpoint, kBucket, model));
  }

  size_t max_chunks = 0;
  for (uint64_t c : f.contexts) max_chunks = std::max<size_t>(max_chunks, c / kGranularity);
  const uint64_t object_bytes = ChunkGeometry(model.layout, ChunkKey()).ObjectBytes();
  auto client_for = [&](const std::string& endpoint, uint64_t dram_bytes) {
    return Client::Create({.endpoints = {endpoint},
                           .bucket = kBucket,
                           .timeout = std::chrono::seconds(120),
                           .parallel_requests = f.parallel,
                           .write_behind_bytes = (max_chunks + 1) * object_bytes,
                           .dram_tier_bytes = dram_bytes});
  };
  // The local gateway's writer keeps every chunk in its DRAM tier: the TTFT baseline.
  OC_ASSIGN_OR_RETURN(auto local_writer,
                      client_for(local_gw.endpoint, (max_chunks + 1) * object_bytes));
  OC_ASSIGN_OR_RETURN(auto rados_writer, client_for(rados_gw.endpoint, 0));
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

  OC_ASSIGN_OR_RETURN(auto rgw_reader, client_for(rgw, 0));
  OC_ASSIGN_OR_RETURN(auto rados_reader, client_for(rados_gw.endpoint, 0));
  OC_ASSIGN_OR_RETURN(auto local_reader, client_for(local_gw.endpoint, 0));
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
  if (f.ttft) {
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
  std::printf("\n%-6s %-22s %9s %10s %10s %10s %11s\n", "ctx", "path", "Gbit/s", "vs radosgw",
              "ttft ms", "added ms", "ttft vs rgw");
  for (uint64_t context : f.contexts) {
    const size_t chunks = context / kGranularity;
    const double bytes = static_cast<double>(chunks) * model.layout.ChunkKvBytes();
    // Throughput: whole prefixes, the paths in a rotating order each repeat.
    std::map<std::string, std::vector<double>> seconds;
    for (int r = 0; r < f.repeats; ++r) {
      for (size_t k = 0; k < paths.size(); ++k) {
        const ReadPath& p = paths[(k + r) % paths.size()];
        OC_ASSIGN_OR_RETURN(double s, TimeRetrieval(p.client, p.mode, &prefix, chunks));
        seconds[p.name].push_back(s);
      }
    }
    // TTFT: the first `hit` of the prompt cached, the rest computed.
    std::map<std::string, std::vector<double>> ttft;
    const size_t cached = static_cast<size_t>(context * f.hit) / kGranularity;
    if (f.ttft && cached > 0) {
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
    const double base_gbps = bytes * 8 / Median(seconds[kBaseline]) / 1e9;
    const double base_ttft = Median(ttft["Local-DRAM-LW"]);
    const double rgw_ttft = Median(ttft[kBaseline]);
    for (const ReadPath& p : paths) {
      const double gbps = bytes * 8 / Median(seconds[p.name]) / 1e9;
      const double t = Median(ttft[p.name]);
      nlohmann::ordered_json row = {{"context", context},   {"path", p.name},
                                    {"backend", p.backend}, {"mode", RetrievalModeName(p.mode)},
                                    {"gbps", gbps},         {"ratio_vs_radosgw", gbps / base_gbps}};
      if (f.ttft) {
        row["ttft_ms"] = t;
        row["added_ms"] = t - base_ttft;
        row["ttft_ratio_vs_radosgw"] = rgw_ttft / t;
      }
      std::printf("%-6s %-22s %9.2f %9.2fx %10.1f %10.1f %10.2fx\n", ContextTag(context).c_str(),
                  p.name.c_str(), gbps, gbps / base_gbps, t, t - base_ttft,
                  f.ttft ? rgw_ttft / t : 0.0);
      rows.push_back(row);
    }
    const std::string tag = ContextTag(context);
    const double agg_gbps = bytes * 8 / Median(seconds["ours/rados S3Agg-LW"]) / 1e9;
    report.Metric("gbps_radosgw_lw_" + tag, base_gbps, "Gbit/s", "radosgw, ranged GET per layer");
    report.Metric("gbps_rados_agg_lw_" + tag, agg_gbps, "Gbit/s", "ours over RADOS, S3Agg-LW");
    report.Metric("ratio_vs_radosgw_" + tag, agg_gbps / base_gbps, "x", "target >= 5x at G=16");
    if (f.ttft) {
      report.Metric("ttft_ms_local_dram_" + tag, base_ttft, "ms", "baseline");
      report.Metric("ttft_ms_radosgw_lw_" + tag, rgw_ttft, "ms");
      report.Metric("ttft_ms_rados_agg_lw_" + tag, Median(ttft["ours/rados S3Agg-LW"]), "ms");
    }
  }
  std::printf("\n");
  report.Print();
  nlohmann::ordered_json j = report.ToJson();
  j["rows"] = rows;
  return WriteJsonFile(f.json, j);
}

}  // namespace

void AddBackendsBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<BackendsFlags>();
  CLI::App* s = bench->add_subcommand(
      "backends",
      "On a Ceph cluster from scripts/ceph-dev: radosgw read with plain S3 (GET per chunk, "
      "ranged GET per chunk per layer) against objectcache serve over RADOS and over the "
      "local store with aggregated layerwise retrieval; throughput and TTFT, every byte checked");
  s->add_option("--ceph", f->ceph_dir, "The cluster's directory (scripts/ceph-dev start DIR)")
      ->required();
  s->add_option("--context", f->contexts, "Prompt lengths in tokens (Llama-3.1-8B, G=16)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--repeats", f->repeats, "Runs per path, interleaved")->capture_default_str();
  s->add_option("--hit", f->hit, "Cached share of the prompt in the TTFT runs")
      ->capture_default_str();
  s->add_option("--parallel", f->parallel, "Concurrent requests of the plain S3 paths")
      ->capture_default_str();
  s->add_flag("!--no-ttft", f->ttft, "Throughput only");
  s->add_option("--gpu", f->gpu, "GPU profile of the TTFT runs: h100, h200")->capture_default_str();
  s->add_option(
       "--dir", f->dir,
       "Scratch directory for our local gateway's store (default: a temporary one, removed)")
      ->capture_default_str();
  s->add_option("--json", f->json, "Write metrics and rows to this JSON file");
  s->callback([f] { RunBench([&] { return RunBackends(*f); }); });
}

}  // namespace objectcache::bench
