// `objectcache bench ttft` and `objectcache demo`: the command lines of the TTFT experiment
// (bench/ttft_experiment.h).
#include <iostream>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/ttft_experiment.h"

namespace objectcache::bench {
namespace {

struct TtftFlags {
  std::string preset = "targets";
  std::vector<std::string> models, modes;
  std::vector<uint64_t> contexts;
  std::vector<double> hits;
  std::vector<uint32_t> granularities;
  int repeats = 0;  // 0: the preset's
  bool no_progress = false;
  TtftConfig config;
};

int PresetRepeats(const std::string& preset) {
  if (preset == "smoke" || preset == "paper") return 1;
  if (preset == "demo") return 2;
  return 3;
}

Status RunTtft(TtftFlags f) {
  OC_ASSIGN_OR_RETURN(f.config.grid, TtftPreset(f.preset));
  TtftGrid& g = f.config.grid;
  if (!f.models.empty()) g.models = f.models;
  if (!f.contexts.empty()) g.contexts = f.contexts;
  if (!f.hits.empty()) g.hits = f.hits;
  if (!f.granularities.empty()) g.granularities = f.granularities;
  if (!f.modes.empty() && !(f.modes.size() == 1 && f.modes[0] == "all")) g.modes = f.modes;
  f.config.repeats = f.repeats > 0 ? f.repeats : PresetRepeats(f.preset);
  f.config.progress = !f.no_progress;
  return RunTtftExperiment(f.config);
}

}  // namespace

void AddTtftBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<TtftFlags>();
  CLI::App* t = bench->add_subcommand(
      "ttft",
      "TTFT of an emulated layerwise prefill with its cached prefix from local DRAM "
      "(Local-DRAM-LW) or object storage (S3-CW, S3-LW, S3Agg-CW, S3Agg-LW), side by side, "
      "every byte checked");
  t->add_option("--preset", f->preset,
                "smoke (CI, < 1 min), demo, targets (Llama-3.1-8B 4K and 64K, 50% hit, G=16), "
                "paper (the whole grid: long)");
  t->add_option("--model", f->models, "Model presets (comma list; default: the preset's)")
      ->delimiter(',');
  t->add_option("--context", f->contexts, "Context lengths in tokens (comma list)")->delimiter(',');
  t->add_option("--hit", f->hits, "Hit ratios (comma list)")->delimiter(',');
  t->add_option("--granularity", f->granularities, "Tokens per chunk (comma list)")->delimiter(',');
  t->add_option("--mode", f->modes,
                "Modes (comma list of Local-DRAM-LW, S3-CW, S3-LW, S3Agg-CW, S3Agg-LW, or all; "
                "Local-DRAM-LW always runs, it is the baseline)")
      ->delimiter(',');
  AddGpuProfile(t, &f->config.gpu);
  t->add_option("--testbed", f->config.testbed,
                "paper: slow the emulated GPU so link : compute is the paper's (100 Gbit/s : "
                "H100), measured in this run; native: the raw profile against the raw link");
  t->add_option("--repeats,--rounds", f->repeats,
                "Runs per mode and cell, interleaved (default: preset's)")
      ->default_str("");
  t->add_option("--endpoint", f->config.endpoint,
                "Use this server instead of starting one (objects stay there)");
  AddScratchDir(t, &f->config.dir);
  t->add_option("--json", f->config.json,
                "Write metrics and rows to this JSON file (and .csv and .svg beside it)");
  t->add_option("--csv", f->config.csv, "Write the rows to this CSV file");
  t->add_option("--svg", f->config.svg, "Write a bar chart of TTFT to this SVG file");
  t->add_flag("--no-progress", f->no_progress, "No progress bar");
  t->add_flag("--cap-sweep", f->config.cap_sweep,
              "S3Agg-LW TTFT of the first cell against the server's bandwidth cap, from 1/4 to 4x "
              "the perfect-overlap bandwidth, and unlimited");
  t->callback([f] { RunBench([&] { return RunTtft(*f); }); });
}

void AddDemoCommand(CLI::App* app) {
  auto f = std::make_shared<TtftFlags>();
  f->preset = "demo";
  CLI::App* d = app->add_subcommand(
      "demo",
      "Starts objectcache serve on a local store, stores a prompt prefix's KV, and prints the "
      "TTFT of an emulated prefill with that prefix from local DRAM and from the server in each "
      "mode, side by side");
  d->add_option("--model", f->models, "Model preset")->delimiter(',');
  d->add_option("--context", f->contexts, "Context length in tokens")->delimiter(',');
  AddScratchDir(d, &f->config.dir);
  d->add_option("--json", f->config.json, "Also write the results here (and .csv, .svg)");
  d->callback([f] {
    std::cout << "ObjectCache demo: a prompt whose first half is cached. The emulated GPU "
                 "prefills the second half layer by layer; each layer waits for its cached KV.\n"
                 "  Local-DRAM-LW  the cached KV is in this process's DRAM (the baseline)\n"
                 "  S3-CW / S3-LW  plain S3 GETs: whole chunks first / a ranged GET per chunk "
                 "per layer\n"
                 "  S3Agg-CW/-LW   one aggregated request to objectcache serve: handed over "
                 "at the end / layer by layer as it streams\n"
                 "added = TTFT over the baseline. Every byte received is checked.\n\n";
    RunBench([&] { return RunTtft(*f); });
  });
}

}  // namespace objectcache::bench
