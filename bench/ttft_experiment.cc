#include "bench/ttft_experiment.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/svg_chart.h"
#include "engine/prefill.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
#include "objectcache/store.h"
#include "s3/s3_connection.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

// The paper's testbed: a 100 Gbit/s link next to an H100.
constexpr double kPaperLinkBytesPerSecond = 100e9 / 8;

const std::vector<std::string> kPaperModels = {"llama-3.1-8b", "granite-3.3-8b",
                                               "deepseek-r1-distill-qwen-7b"};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A progress bar on stderr when it is a terminal.
class Progress {
 public:
  Progress(size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(2)) {}
  ~Progress() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }
  void Step(const std::string& what) {
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done_ / std::max<size_t>(1, total_));
    std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done_, total_, what.c_str());
    std::fflush(stderr);
    done_++;
  }

 private:
  const size_t total_;
  const bool enabled_;
  size_t done_ = 0;
};

// A mode of kTtftModes: Local-DRAM-LW is S3Agg-LW's retrieval from the DRAM tier.
RetrievalMode ModeOf(const std::string& mode) {
  return mode == "Local-DRAM-LW" ? RetrievalMode::kAggregatedLayerwise
                                 : ParseRetrievalMode(mode).value();
}

Status WriteCsv(const std::string& path, const std::vector<TtftRow>& rows) {
  if (path.empty()) return Status();
  std::ofstream out(path);
  out << "model,context,hit,granularity,mode,ttft_ms,added_ms,added_pct,stall_ms,first_layer_ms,"
         "cached_tokens\n";
  for (const TtftRow& r : rows) {
    out << r.model << ',' << r.context << ',' << r.hit << ',' << r.granularity << ',' << r.mode
        << ',' << r.ttft_ms << ',' << r.added_ms << ',' << r.added_pct << ',' << r.stall_ms << ','
        << r.first_layer_ms << ',' << r.cached_tokens << '\n';
  }
  out.close();
  if (!out) return ErrnoError("writing " + path, errno);
  return Status();
}

Status WriteSvg(const std::string& path, const std::vector<TtftRow>& rows,
                const std::string& subtitle) {
  if (path.empty()) return Status();
  BarChart chart{.title = "TTFT of an emulated prefill, by where the cached prefix comes from",
                 .subtitle = subtitle,
                 .value_label = "TTFT (ms)",
                 .series = {},
                 .groups = {}};
  for (const TtftRow& r : rows) {
    if (std::find(chart.series.begin(), chart.series.end(), r.mode) == chart.series.end()) {
      chart.series.push_back(r.mode);
    }
    const std::string label =
        r.model + " " + TokensTag(r.context) + " hit " +
        std::to_string(static_cast<int>(std::lround(r.hit * 1000)) / 10.0).substr(0, 4) + "% G" +
        std::to_string(r.granularity);
    if (chart.groups.empty() || chart.groups.back().label != label) {
      chart.groups.push_back({.label = label, .values = {}});
    }
    chart.groups.back().values[r.mode] = r.ttft_ms;
  }
  return WriteBarChartSvg(path, chart);
}

std::string Replace(std::string path, const std::string& ext) {
  return fs::path(path).replace_extension(ext).string();
}

// TTFT of the grid's first cell, S3Agg-LW, against the server's bandwidth cap: from a quarter
// of the perfect-overlap bandwidth (bytes per layer / compute per layer) to four times it,
// and unlimited.
Status RunCapSweep(const TtftConfig& config, const engine::GpuProfile& gpu, double link,
                   double dilation) {
  const TtftGrid& grid = config.grid;
  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset(grid.models.at(0)));
  OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(model.name));
  model.layout.tokens_per_chunk = grid.granularities.at(0);
  const uint64_t context = grid.contexts.at(0);
  const double hit = grid.hits.at(0);
  const size_t chunks = static_cast<size_t>(context * hit) / model.layout.tokens_per_chunk;
  if (chunks == 0) return InvalidArgumentError("the cell has no cached chunk");
  const engine::PrefillPlan plan{.model = compute,
                                 .gpu = gpu,
                                 .cached_tokens = chunks * model.layout.tokens_per_chunk,
                                 .new_tokens = context - chunks * model.layout.tokens_per_chunk,
                                 .dilation = dilation};
  const double per_layer = engine::LayerFlops(compute, plan.cached_tokens, plan.new_tokens) /
                           gpu.flops_per_second * dilation;
  const double overlap = static_cast<double>(chunks * model.layout.LayerSliceBytes()) / per_layer;
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(config.dir, "objectcache-bench-ttft"));
  const fs::path& root = scratch.path();
  std::vector<double> factors = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0, 0.0};  // 0: none
  std::printf("cell: %s %s hit %.3f G%u; perfect overlap needs %.2f Gbit/s\n\n%-14s %10s %10s\n",
              model.name.c_str(), TokensTag(context).c_str(), hit, model.layout.tokens_per_chunk,
              overlap * 8 / 1e9, "cap Gbit/s", "ttft ms", "added ms");
  PrefixSet prefix;
  BarChart chart{.title = "S3Agg-LW TTFT against the server's bandwidth cap",
                 .subtitle = model.name + " " + TokensTag(context) + ", perfect overlap at " +
                             std::to_string(overlap * 8 / 1e9).substr(0, 5) + " Gbit/s",
                 .value_label = "TTFT (ms)",
                 .series = {"S3Agg-LW"},
                 .groups = {}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  const double ideal_ms = per_layer * model.layout.num_layers * 1e3;
  bool stored = false;
  for (double factor : factors) {
    const double cap = factor * overlap;
    char cap_arg[32];
    std::snprintf(cap_arg, sizeof(cap_arg), "%.0fB", cap);
    OC_ASSIGN_OR_RETURN(
        ServerChild server,
        StartServer(root, /*fresh=*/!stored,
                    {"--bandwidth-cap", factor > 0 ? std::string(cap_arg) : "unlimited"}));
    OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "sweep", model));
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                        Client::Create({.endpoints = {server.endpoint}, .bucket = "sweep"}));
    if (!stored) {
      OC_ASSIGN_OR_RETURN(prefix, StorePrefix(model, chunks, 99, client.get()));
      stored = true;
    }
    std::vector<double> ttft;
    for (int r = 0; r < config.repeats; ++r) {
      OC_ASSIGN_OR_RETURN(
          PrefillRun run,
          RunPrefillOnce(client.get(), RetrievalMode::kAggregatedLayerwise, &prefix, chunks, plan));
      ttft.push_back(run.ttft_ms);
    }
    const double t = Median(ttft);
    const std::string label = factor > 0 ? std::to_string(cap * 8 / 1e9).substr(0, 5) + " Gbit/s" +
                                               (factor == 1.0 ? " = perfect overlap" : "")
                                         : "unlimited";
    std::printf("%-14s %10.1f %10.1f%s\n", factor > 0 ? label.substr(0, 6).c_str() : "unlimited", t,
                t - ideal_ms, factor == 1.0 ? "   <- perfect overlap" : "");
    chart.groups.push_back({.label = label, .values = {{"S3Agg-LW", t}}});
    rows.push_back({{"cap_gbps", factor > 0 ? cap * 8 / 1e9 : -1},
                    {"cap_over_overlap", factor},
                    {"ttft_ms", t},
                    {"added_ms", t - ideal_ms}});
  }
  std::printf("\nadded = TTFT minus compute alone (%.1f ms); link %.2f Gbit/s, compute x %.2f\n",
              ideal_ms, link * 8 / 1e9, dilation);
  nlohmann::ordered_json j;
  j["benchmark"] = "ttft-cap-sweep";
  j["overlap_gbps"] = overlap * 8 / 1e9;
  j["rows"] = rows;
  OC_RETURN_IF_ERROR(WriteJsonFile(config.json, j));
  const std::string svg =
      !config.svg.empty() || config.json.empty() ? config.svg : Replace(config.json, ".svg");
  if (!svg.empty()) OC_RETURN_IF_ERROR(WriteBarChartSvg(svg, chart));
  std::error_code ec;
  fs::remove_all(root / "store", ec);
  return Status();
}

}  // namespace

Result<PrefillRun> RunPrefillOnce(Client* client, RetrievalMode mode, PrefixSet* p, size_t chunks,
                                  const engine::PrefillPlan& plan) {
  p->ClearRegions(chunks);
  const double t0 = NowSeconds();
  OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> retrieval,
                      p->StartRetrieval(client, mode, chunks));
  engine::PrefillResult result =
      engine::RunPrefill(plan, [&](uint32_t l) { return retrieval->WaitForLayer(l); });
  const double ttft = NowSeconds() - t0;
  OC_RETURN_IF_ERROR(result.status);
  OC_RETURN_IF_ERROR(retrieval->Wait());
  OC_RETURN_IF_ERROR(p->CheckRetrieved(*retrieval, chunks));
  double stall = 0;
  for (double s : result.stall_seconds) stall += s;
  return PrefillRun{
      .ttft_ms = ttft * 1e3,
      .stall_ms = stall * 1e3,
      .first_layer_ms = result.stall_seconds.empty() ? 0 : result.stall_seconds[0] * 1e3};
}

double PaperDilation(const engine::GpuProfile& gpu, const engine::GpuProfile& h100,
                     double link_bytes_per_second) {
  return (kPaperLinkBytesPerSecond / link_bytes_per_second) *
         (gpu.flops_per_second / h100.flops_per_second);
}

double MeasureLoopbackBytesPerSecond(double seconds) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    return 0;
  }
  std::thread sender([addr, seconds] {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      std::string buf(1 << 20, 'x');
      const double end = NowSeconds() + seconds;
      while (NowSeconds() < end) {
        if (::send(s, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) break;
      }
    }
    ::close(s);
  });
  const int conn = ::accept(listener, nullptr, nullptr);
  std::string buf(1 << 20, '\0');
  uint64_t bytes = 0;
  const double t0 = NowSeconds();
  for (ssize_t n; conn >= 0 && (n = ::recv(conn, buf.data(), buf.size(), 0)) > 0;) bytes += n;
  const double elapsed = NowSeconds() - t0;
  sender.join();
  if (conn >= 0) ::close(conn);
  ::close(listener);
  return elapsed > 0 ? bytes / elapsed : 0;
}

Result<TtftGrid> TtftPreset(std::string_view name) {
  const std::vector<std::string> all_modes = kTtftModes;
  if (name == "smoke") return TtftGrid{{"llama-3.1-8b"}, {4096}, {0.5}, {16}, all_modes};
  if (name == "demo") return TtftGrid{{"llama-3.1-8b"}, {16384}, {0.5}, {16}, all_modes};
  if (name == "targets") {
    return TtftGrid{{"llama-3.1-8b"}, {4096, 65536}, {0.5}, {16}, all_modes};
  }
  if (name == "paper") {
    return TtftGrid{
        kPaperModels, {4096, 16384, 65536}, {0.125, 0.5, 0.875}, {16, 64, 256}, all_modes};
  }
  return InvalidArgumentError("unknown preset '" + std::string(name) +
                              "' (smoke, demo, targets, paper)");
}

Status RunTtftExperiment(const TtftConfig& config) {
  const TtftGrid& grid = config.grid;
  OC_ASSIGN_OR_RETURN(engine::GpuProfile gpu, engine::FindGpuProfile(config.gpu));
  OC_ASSIGN_OR_RETURN(engine::GpuProfile h100, engine::FindGpuProfile("h100"));
  if (config.testbed != "paper" && config.testbed != "native") {
    return InvalidArgumentError("--testbed is paper or native");
  }
  if (config.repeats < 1) return InvalidArgumentError("--repeats must be at least 1");
  std::vector<std::string> modes = {"Local-DRAM-LW"};
  for (const std::string& m : grid.modes) {
    auto known = std::find_if(kTtftModes.begin(), kTtftModes.end(),
                              [&](const std::string& k) { return Lower(k) == Lower(m); });
    if (known == kTtftModes.end()) {
      return InvalidArgumentError("unknown mode '" + m +
                                  "' (Local-DRAM-LW, S3-CW, S3-LW, "
                                  "S3Agg-CW, S3Agg-LW)");
    }
    if (std::find(modes.begin(), modes.end(), *known) == modes.end()) modes.push_back(*known);
  }
  for (double h : grid.hits) {
    if (!(h > 0 && h < 1)) return InvalidArgumentError("hit ratios lie in (0, 1)");
  }

  // The link, measured now; the dilation that makes link : compute the paper's.
  const double link = MeasureLoopbackBytesPerSecond(1.0);
  if (link <= 0) return UnavailableError("could not measure the loopback link");
  const double dilation = config.testbed == "paper" ? PaperDilation(gpu, h100, link) : 1.0;
  std::printf("link: one TCP stream over loopback %.2f Gbit/s; testbed %s: compute x %.2f\n",
              link * 8 / 1e9, config.testbed.c_str(), dilation);
  if (config.cap_sweep) return RunCapSweep(config, gpu, link, dilation);

  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(config.dir, "objectcache-bench-ttft"));
  const fs::path& root = scratch.path();
  std::vector<TtftRow> rows;
  Progress progress(grid.models.size() * grid.granularities.size() * grid.contexts.size() *
                        grid.hits.size() * modes.size() * config.repeats,
                    config.progress);
  std::printf("\n%-28s %-6s %-6s %-4s %-14s %10s %10s %9s %9s %9s\n", "model", "ctx", "hit", "G",
              "mode", "ttft ms", "added ms", "added %", "layer0 ms", "stall ms");
  uint64_t seed = 42;
  for (const std::string& model_name : grid.models) {
    OC_ASSIGN_OR_RETURN(ModelPreset preset, FindModelPreset(model_name));
    OC_ASSIGN_OR_RETURN(engine::ModelCompute compute, engine::FindModelCompute(model_name));
    for (uint32_t g : grid.granularities) {
      ModelPreset model = preset;
      model.layout.tokens_per_chunk = g;
      OC_RETURN_IF_ERROR(model.layout.Validate());
      size_t max_chunks = 0;
      for (uint64_t ctx : grid.contexts) {
        for (double h : grid.hits) {
          max_chunks = std::max<size_t>(max_chunks, static_cast<size_t>(ctx * h) / g);
        }
      }
      if (max_chunks == 0) continue;
      ServerChild server{.process = nullptr, .endpoint = config.endpoint};
      if (config.endpoint.empty()) {
        OC_ASSIGN_OR_RETURN(server, StartServer(root, /*fresh=*/true));
      }
      const std::string bucket = "ttft-" + model_name + "-g" + std::to_string(g);
      OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, bucket, model));
      const uint64_t object_bytes = ChunkGeometry(model.layout, ChunkKey()).ObjectBytes();
      // The writer keeps every chunk in its DRAM tier: Local-DRAM-LW reads from there.
      OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> local,
                          Client::Create({.endpoints = {server.endpoint},
                                          .bucket = bucket,
                                          .write_behind_bytes = (max_chunks + 1) * object_bytes,
                                          .dram_tier_bytes = (max_chunks + 1) * object_bytes}));
      OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> remote,
                          Client::Create({.endpoints = {server.endpoint}, .bucket = bucket}));
      OC_ASSIGN_OR_RETURN(PrefixSet prefix, StorePrefix(model, max_chunks, seed++, local.get()));
      for (uint64_t context : grid.contexts) {
        for (double hit : grid.hits) {
          const size_t chunks = static_cast<size_t>(context * hit) / g;
          if (chunks == 0) continue;
          const engine::PrefillPlan plan{.model = compute,
                                         .gpu = gpu,
                                         .cached_tokens = chunks * g,
                                         .new_tokens = context - chunks * g,
                                         .dilation = dilation};
          std::map<std::string, std::vector<PrefillRun>> results;
          for (int r = 0; r < config.repeats; ++r) {
            for (size_t k = 0; k < modes.size(); ++k) {
              const std::string& mode = modes[(k + r) % modes.size()];  // rotate the order
              progress.Step(model_name + " " + TokensTag(context) + " G" + std::to_string(g) + " " +
                            mode);
              Client* via = mode == "Local-DRAM-LW" ? local.get() : remote.get();
              OC_ASSIGN_OR_RETURN(PrefillRun run,
                                  RunPrefillOnce(via, ModeOf(mode), &prefix, chunks, plan));
              results[mode].push_back(run);
            }
          }
          auto median = [&](const std::string& mode, double PrefillRun::*field) {
            std::vector<double> v;
            for (const PrefillRun& run : results[mode]) v.push_back(run.*field);
            return Median(v);
          };
          const double base = median("Local-DRAM-LW", &PrefillRun::ttft_ms);
          for (const std::string& mode : modes) {
            TtftRow row{.model = model_name,
                        .context = context,
                        .hit = hit,
                        .granularity = g,
                        .mode = mode,
                        .ttft_ms = median(mode, &PrefillRun::ttft_ms),
                        .stall_ms = median(mode, &PrefillRun::stall_ms),
                        .first_layer_ms = median(mode, &PrefillRun::first_layer_ms),
                        .cached_tokens = static_cast<uint32_t>(chunks * g)};
            row.added_ms = row.ttft_ms - base;
            row.added_pct = 100 * row.added_ms / base;
            std::printf("%-28s %-6s %-6.3f %-4u %-14s %10.1f %10.1f %8.1f%% %9.1f %9.1f\n",
                        model_name.c_str(), TokensTag(context).c_str(), hit, g, mode.c_str(),
                        row.ttft_ms, row.added_ms, row.added_pct, row.first_layer_ms, row.stall_ms);
            rows.push_back(row);
          }
        }
      }
    }
  }

  // The targets the grid covers (Llama-3.1-8B, 50% hit, G=16).
  Report report("ttft");
  report.Param("gpu", config.gpu);
  report.Param("testbed", config.testbed);
  report.Param("repeats", config.repeats);
  report.Metric("link_gbps", link * 8 / 1e9, "Gbit/s", "one TCP stream over loopback");
  report.Metric("dilation", dilation, "x", "emulated compute times are multiplied by this");
  auto find = [&](uint64_t context, const std::string& mode) -> const TtftRow* {
    for (const TtftRow& r : rows) {
      if (r.model == "llama-3.1-8b" && r.context == context && r.hit == 0.5 &&
          r.granularity == 16 && r.mode == mode)
        return &r;
    }
    return nullptr;
  };
  if (const TtftRow* r = find(65536, "S3Agg-LW")) {
    report.Metric("agglw_added_pct_64k", r->added_pct, "%", "target <= 3");
  }
  if (const TtftRow* r = find(4096, "S3Agg-LW")) {
    const ModelPreset m = *FindModelPreset("llama-3.1-8b");
    const double layer_ms = 1e3 * r->cached_tokens * m.layout.TokenLayerBytes() / link;
    report.Metric("agglw_added_ms_4k", r->added_ms, "ms");
    report.Metric("one_layer_ms_4k", layer_ms, "ms", "one layer's KV at the measured link");
    report.Metric("agglw_added_over_layer_4k", r->added_ms / layer_ms, "x", "target <= 1.5");
    if (const TtftRow* p = find(4096, "S3-LW")) {
      report.Metric("s3lw_over_agglw_added_4k", p->added_ms / std::max(1e-3, r->added_ms), "x",
                    "target >= 5");
    }
  }
  report.Print();
  std::error_code ignored;
  if (config.endpoint.empty()) fs::remove_all(root / "store", ignored);

  // The metrics, plus one row per (cell, mode) under "rows".
  nlohmann::ordered_json j = report.ToJson();
  nlohmann::ordered_json jrows = nlohmann::ordered_json::array();
  for (const TtftRow& r : rows) {
    jrows.push_back({{"model", r.model},
                     {"context", r.context},
                     {"hit", r.hit},
                     {"granularity", r.granularity},
                     {"mode", r.mode},
                     {"ttft_ms", r.ttft_ms},
                     {"added_ms", r.added_ms},
                     {"added_pct", r.added_pct},
                     {"stall_ms", r.stall_ms},
                     {"first_layer_ms", r.first_layer_ms}});
  }
  j["rows"] = jrows;
  OC_RETURN_IF_ERROR(WriteJsonFile(config.json, j));
  const std::string csv =
      !config.csv.empty() || config.json.empty() ? config.csv : Replace(config.json, ".csv");
  const std::string svg =
      !config.svg.empty() || config.json.empty() ? config.svg : Replace(config.json, ".svg");
  OC_RETURN_IF_ERROR(WriteCsv(csv, rows));
  char subtitle[160];
  std::snprintf(subtitle, sizeof(subtitle), "GPU %s, testbed %s (compute x %.2f), link %.2f Gbit/s",
                config.gpu.c_str(), config.testbed.c_str(), dilation, link * 8 / 1e9);
  OC_RETURN_IF_ERROR(WriteSvg(svg, rows, subtitle));
  for (const std::string& f : {config.json, csv, svg}) {
    if (!f.empty()) std::printf("wrote %s\n", f.c_str());
  }
  return Status();
}

}  // namespace objectcache::bench
