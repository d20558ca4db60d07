// `objectcache report`: the paper's evaluation in one command (docs/report.md). It measures the
// machine, runs each experiment with its baseline in the same run (the `bench` subcommands, as
// child processes of this binary, and two experiments of its own), and writes one page with
// every figure: DIR/index.html (self-contained, inline SVG), DIR/report.md with the plots as SVG
// files beside it, and DIR/<figure>.json for each figure.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::bench {

// What the report found about the machine it ran on.
struct Machine {
  unsigned cores = 0;
  double link_gbps = 0;        // one TCP stream over loopback
  double memcpy_gbps = 0;      // one core copying 256 MiB
  double disk_write_mbps = 0;  // 256 MiB written and fdatasync'ed in the output directory
  std::string gpu;             // "none (...)" or the device's name
  std::string kernel, date;
  std::string Describe() const;
};

// One figure of the report: what the paper found, what this run found, against what, and
// whether the paper's headline holds here.
struct Figure {
  std::string id;     // file names: "fig13" -> fig13.json, fig13.svg
  std::string title;  // "Fig. 13: TTFT of the five retrieval modes"
  std::string paper, ours, baseline;
  std::string holds;  // "yes", "no", or why it cannot be said
  std::vector<std::string> svgs;
  std::vector<std::string> table_header;
  std::vector<std::vector<std::string>> table_rows;
  nlohmann::ordered_json data;  // the numbers behind it
};

// How the experiments run: the scale, where their files go, the binary they call.
struct ReportContext {
  bool full = false;
  std::string out;       // the report's directory
  std::string ceph_dir;  // a cluster from scripts/ceph-dev, or empty
  std::string markdown;  // a second Markdown copy of the report, or empty
  std::string scratch;   // the report's own experiments' files: a fresh directory in `out`
  std::string self;      // this binary
  Machine machine;
  // Runs `objectcache bench NAME ARGS... --json OUT/raw/NAME.json` (output to OUT/logs/NAME.log)
  // and returns the JSON.
  Result<nlohmann::json> Bench(const std::string& name, const std::string& tag,
                               std::vector<std::string> args) const;
};

// One experiment: its name, its expected duration at each scale, and what it makes.
struct Experiment {
  std::string name;
  double quick_seconds = 0, full_seconds = 0;
  std::function<Result<std::vector<Figure>>(const ReportContext&)> run;
};

// The experiments, in the report's order (bench/report_figures.cc).
std::vector<Experiment> ReportExperiments();

// The report's own experiments (bench/report_experiments.cc): Fig. 4, Figs. 8-9, Fig. 10.
Result<std::vector<Figure>> LookupFigures(const ReportContext& ctx);
Result<std::vector<Figure>> ObjectSizeFigures(const ReportContext& ctx);
Result<std::vector<Figure>> BreakdownFigures(const ReportContext& ctx);

// Numbers in figure texts: `digits` after the point (Signed: with its sign, "+" or "-");
// "yes"/"no".
std::string Fixed(double v, int digits);
std::string Signed(double v, int digits);
std::string YesNo(bool b);

// Registers `report`.
void AddReportCommand(CLI::App* app);

}  // namespace objectcache::bench
