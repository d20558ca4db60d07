// The TTFT experiment (issue 4; the compute model is docs/engine.md): an emulated layerwise prefill
// whose cached prefix comes from local DRAM (Local-DRAM-LW, the baseline) or from object storage in
// one of four ways (S3-CW, S3-LW, S3Agg-CW, S3Agg-LW), side by side in the same run, over a
// grid of models, contexts, hit ratios and chunk granularities. Every run checks every byte it
// received against what was stored. docs/engine.md has the method and the time dilation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/kv_fixture.h"
#include "engine/prefill.h"
#include "objectcache/client.h"
#include "objectcache/status.h"

namespace objectcache::bench {

// The baseline first, then the four object-storage modes.
inline const std::vector<std::string> kTtftModes = {"Local-DRAM-LW", "S3-CW", "S3-LW", "S3Agg-CW",
                                                    "S3Agg-LW"};

struct TtftGrid {
  std::vector<std::string> models;
  std::vector<uint64_t> contexts;
  std::vector<double> hits;
  std::vector<uint32_t> granularities;
  std::vector<std::string> modes;  // of kTtftModes; Local-DRAM-LW always runs (the baseline)
};

struct TtftConfig {
  TtftGrid grid;
  std::string gpu = "h100";
  // "paper": the emulated GPU is slowed so that link rate : compute rate is the paper's
  // (100 Gbit/s : an H100); "native": the raw profile against the raw link.
  std::string testbed = "paper";
  int repeats = 3;
  std::string endpoint;  // empty: start `objectcache serve` on a local store in `dir`
  std::string dir;       // empty: a temporary directory (ScratchRoot)
  bool progress = true;  // a progress bar when stderr is a terminal
  // Instead of the grid: S3Agg-LW TTFT of the grid's first cell against a server bandwidth cap
  // from well below to well above the perfect-overlap bandwidth (docs/scheduler.md).
  bool cap_sweep = false;
  std::string json, csv, svg;
};

// "smoke" (CI, under a minute), "demo" (objectcache demo), "targets" (the three
// targets: Llama-3.1-8B at 4K and 64K, 50% hit, G=16), "paper" (the whole grid).
Result<TtftGrid> TtftPreset(std::string_view name);

// One result row.
struct TtftRow {
  std::string model;
  uint64_t context = 0;
  double hit = 0;
  uint32_t granularity = 0;
  std::string mode;
  double ttft_ms = 0, added_ms = 0, added_pct = 0;
  double stall_ms = 0;        // median total per-layer stall
  double first_layer_ms = 0;  // median wait for layer 0's KV
  uint32_t cached_tokens = 0;
};

// Runs the grid, prints the table (and the targets that the grid covers), writes the files.
Status RunTtftExperiment(const TtftConfig& config);

// One emulated prefill whose cached prefix (the first `chunks` chunks of `p`) comes through
// `client` in `mode`; DataLoss unless every byte is what was stored.
struct PrefillRun {
  double ttft_ms = 0, stall_ms = 0, first_layer_ms = 0;
};
Result<PrefillRun> RunPrefillOnce(Client* client, RetrievalMode mode, PrefixSet* p, size_t chunks,
                                  const engine::PrefillPlan& plan);

// The factor on compute times that makes link : compute what the paper's testbed has (a
// 100 Gbit/s link next to an H100) when the link carries `link_bytes_per_second`.
double PaperDilation(const engine::GpuProfile& gpu, const engine::GpuProfile& h100,
                     double link_bytes_per_second);

// The rate of one TCP stream over loopback (what iperf3 -c 127.0.0.1 measures), in bytes/s.
double MeasureLoopbackBytesPerSecond(double seconds);

}  // namespace objectcache::bench
