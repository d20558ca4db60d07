// `objectcache bench ttft`: TTFT of an emulated layerwise prefill whose cached prefix comes from
// local DRAM (the Local-DRAM-LW baseline) or from `objectcache serve` through aggregated
// layerwise retrieval (S3Agg-LW), side by side in the same run, every byte checked.
//
// A slice of issue 4's experiment: Local-DRAM-LW, S3Agg-LW and S3-LW. The chunkwise modes
// (S3-CW, S3Agg-CW), the measured-link time dilation and the full grid are still to come.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "client/s3_connection.h"
#include "engine/prefill.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

struct TtftFlags {
  std::string model = "llama-3.1-8b";
  std::vector<uint64_t> contexts = {4096, 16384};
  std::vector<double> hits = {0.5};
  std::string gpu = "h100";
  double dilation = 1.0;
  int repeats = 3;
  std::string dir = "./objectcache-bench-ttft";
  std::string json;
};

// Local-DRAM-LW: a thread copies the prefix layer by layer from DRAM into the regions, as an
// engine's host-to-device copies would, and marks each layer ready.
struct DramLayerwise {
  std::mutex mu;
  std::condition_variable cv;
  uint32_t ready = 0;
  std::thread copier;

  void Start(const std::vector<std::string>& kv, const KvLayout& layout,
             std::vector<std::string>* regions) {
    copier = std::thread([&, regions] {
      const uint64_t slice = layout.LayerSliceBytes();
      for (uint32_t l = 0; l < layout.num_layers; ++l) {
        for (size_t c = 0; c < kv.size(); ++c) {
          std::memcpy((*regions)[l].data() + c * slice, kv[c].data() + l * slice, slice);
        }
        {
          std::lock_guard lock(mu);
          ready = l + 1;
        }
        cv.notify_all();
      }
    });
  }
  Status Wait(uint32_t layer) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return ready > layer; });
    return Status();
  }
  ~DramLayerwise() {
    if (copier.joinable()) copier.join();
  }
};

Status CheckRegions(const std::vector<std::string>& kv, const KvLayout& layout,
                    const std::vector<std::string>& regions) {
  const uint64_t slice = layout.LayerSliceBytes();
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (size_t c = 0; c < kv.size(); ++c) {
      if (std::memcmp(regions[l].data() + c * slice, kv[c].data() + l * slice, slice) != 0) {
        return DataLossError("layer " + std::to_string(l) + " of chunk " + std::to_string(c) +
                             " differs from what was stored");
      }
    }
  }
  return Status();
}

Status RunTtft(const TtftFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset(f.model));
  OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(f.model));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile gpu, engine::FindGpuProfile(f.gpu));
  const KvLayout& layout = model.layout;
  const fs::path root = fs::absolute(f.dir);
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root, ec);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const uint16_t port = FreePort();
  ChildProcess server(
      {self, "serve", "--anonymous", "--listen", "127.0.0.1:" + std::to_string(port), "--store",
       (root / "store").string(), "--log-level", "error"},
      (root / "serve.log").string());
  if (!WaitForPort(port))
    return UnavailableError("objectcache serve did not start (see serve.log)");
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(port);
  {
    // The bucket, bound to the layout.
    client::S3Connection conn({.host = "127.0.0.1", .port = port}, {});
    OC_ASSIGN_OR_RETURN(client::S3Response res,
                        conn.Send("PUT", "/ttft", {}, "", [](auto) { return Status(); },
                                  {{"x-objectcache-kv-layout", f.model}}));
    if (res.status != 200) return UnavailableError("creating the bucket failed: " + res.error_body);
  }
  OC_ASSIGN_OR_RETURN(
      std::unique_ptr<Client> client,
      Client::Create(
          {.endpoints = {endpoint}, .bucket = "ttft", .write_behind_bytes = size_t{8} << 30}));
  Report report("ttft");
  report.Param("model", f.model);
  report.Param("gpu", f.gpu);
  report.Param("dilation", f.dilation);
  report.Param("repeats", f.repeats);
  report.Param("granularity", layout.tokens_per_chunk);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf("\n%-8s %-5s %-14s %10s %10s %9s\n", "context", "hit", "mode", "ttft ms", "added ms",
              "added %");
  std::mt19937_64 rng(42);
  for (uint64_t context : f.contexts) {
    for (double hit : f.hits) {
      const uint64_t chunks = static_cast<uint64_t>(context * hit) / layout.tokens_per_chunk;
      const uint64_t cached = chunks * layout.tokens_per_chunk;
      std::vector<uint32_t> tokens(cached);
      for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 128256);
      std::vector<ChunkKey> keys = KeyNamespace(model.name, layout).KeysForTokens(tokens);
      std::vector<std::string> kv(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        kv[i].resize(layout.ChunkKvBytes());
        for (size_t j = 0; j + 8 <= kv[i].size(); j += 8) {
          uint64_t v = rng();
          std::memcpy(&kv[i][j], &v, 8);
        }
        OC_ASSIGN_OR_RETURN(std::string obj, EncodeChunkObject(layout, keys[i], AsBytes(kv[i])));
        client->StoreAsync(keys[i], std::move(obj));
      }
      client->Flush();
      if (client->Stats().failed + client->Stats().dropped > 0) {
        return InternalError("storing the prefix failed");
      }
      engine::PrefillPlan plan{.model = compute,
                               .gpu = gpu,
                               .cached_tokens = cached,
                               .new_tokens = context - cached,
                               .dilation = f.dilation};
      std::vector<std::string> regions(layout.num_layers,
                                       std::string(keys.size() * layout.LayerSliceBytes(), '\0'));
      // Modes: 0 Local-DRAM-LW, 1 S3Agg-LW, 2 S3-LW (plain per-layer ranged GETs).
      static constexpr const char* kModes[] = {"Local-DRAM-LW", "S3Agg-LW", "S3-LW"};
      std::vector<double> ttft[3];
      for (int r = 0; r < f.repeats; ++r) {
        for (int k = 0; k < 3; ++k) {
          const int mode = (k + r) % 3;  // rotate which goes first
          for (std::string& region : regions) std::memset(region.data(), 0, region.size());
          engine::PrefillResult result;
          if (mode == 0) {
            DramLayerwise source;
            const double t0 = NowSeconds();
            source.Start(kv, layout, &regions);
            result = engine::RunPrefill(plan, [&](uint32_t l) { return source.Wait(l); });
            result.ttft_seconds = NowSeconds() - t0;
          } else {
            LayerwiseRequest req{.model = model, .keys = keys, .layers = {0, layout.num_layers}};
            req.mode =
                mode == 1 ? RetrievalMode::kAggregatedLayerwise : RetrievalMode::kPlainLayerwise;
            for (std::string& region : regions) req.regions.push_back(AsWritableBytes(region));
            const double t0 = NowSeconds();
            OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> retrieval,
                                client->RetrieveLayerwise(std::move(req)));
            result =
                engine::RunPrefill(plan, [&](uint32_t l) { return retrieval->WaitForLayer(l); });
            result.ttft_seconds = NowSeconds() - t0;
            OC_RETURN_IF_ERROR(retrieval->Wait());
          }
          OC_RETURN_IF_ERROR(result.status);
          OC_RETURN_IF_ERROR(CheckRegions(kv, layout, regions));
          ttft[mode].push_back(result.ttft_seconds * 1e3);
        }
      }
      const double base = Median(ttft[0]);
      for (int mode = 0; mode < 3; ++mode) {
        const double t = Median(ttft[mode]);
        const double added = t - base;
        std::printf("%-8llu %-5.3f %-14s %10.2f %10.2f %8.1f%%\n",
                    static_cast<unsigned long long>(context), hit, kModes[mode], t, added,
                    100 * added / base);
        rows.push_back({{"model", f.model},
                        {"context", context},
                        {"hit", hit},
                        {"granularity", layout.tokens_per_chunk},
                        {"mode", kModes[mode]},
                        {"ttft_ms", t},
                        {"added_ms", added},
                        {"added_pct", 100 * added / base}});
      }
      const double ours = Median(ttft[1]), plain = Median(ttft[2]);
      report.Metric("s3lw_over_s3agglw_added_ctx" + std::to_string(context),
                    (plain - base) / std::max(1e-9, ours - base), "x",
                    "added TTFT of per-layer GETs / aggregated");
      report.Metric("added_pct_ctx" + std::to_string(context), 100 * (ours - base) / base, "%",
                    "S3Agg-LW over Local-DRAM-LW");
    }
  }
  report.Print();
  fs::remove_all(root / "store", ec);
  nlohmann::ordered_json j;
  j["benchmark"] = "ttft";
  j["rows"] = rows;
  OC_RETURN_IF_ERROR(WriteJsonFile(f.json, j));
  return Status();
}

}  // namespace

void AddTtftBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<TtftFlags>();
  CLI::App* t = bench->add_subcommand(
      "ttft",
      "TTFT of an emulated layerwise prefill: Local-DRAM-LW, S3Agg-LW and S3-LW (a first slice)");
  t->add_option("--model", f->model, "Model preset")->capture_default_str();
  t->add_option("--context", f->contexts, "Context lengths in tokens")
      ->capture_default_str()
      ->delimiter(',');
  t->add_option("--hit", f->hits, "Hit ratios")->capture_default_str()->delimiter(',');
  t->add_option("--gpu", f->gpu, "GPU profile: h100, h200")->capture_default_str();
  t->add_option("--dilation", f->dilation, "Multiply compute times (time dilation)")
      ->capture_default_str();
  t->add_option("--repeats", f->repeats, "Runs per mode (interleaved)")->capture_default_str();
  t->add_option("--dir", f->dir, "Scratch directory")->capture_default_str();
  t->add_option("--json", f->json, "Write rows to this JSON file");
  t->callback([f] { RunBench([&] { return RunTtft(*f); }); });
}

}  // namespace objectcache::bench
