// `objectcache bench`: the system benchmarks (db_bench style). Each prints a short table and,
// with --json PATH, writes its metrics; each runs its baseline in the same process, interleaved
// with ours, and reports medians and ratios; each checks the bytes it reads.
//
//   bench keys    chunk-key hashing of a 128K-token prompt
//   bench store   local store: 2 MiB chunk puts; 64 KiB layer-slice reads of 256 objects
//                 against a plain pread loop over the same bytes
//   bench index   local store index: memory per object and rebuild time at 10^6 objects
//   bench s3      objectcache serve against nginx: GET/PUT throughput and latency
//   bench ttft    emulated prefill TTFT: Local-DRAM-LW against S3-CW, S3-LW, S3Agg-CW and
//                 S3Agg-LW over a grid of models, contexts, hit ratios and granularities
//   bench sched   bandwidth cap shared by equal, bytes and compute-aware: added TTFT
//   bench mem     elastic KV pool vs a static one: page costs, allocation, memory given back
//   bench nvme-kv   the NVMe-KV controller against S3 GET/HEAD and direct store calls
//   bench gpu     KV into and out of paged device memory (a GPU or the emulated device):
//                 every byte checked, one layer's scatter against one plain copy
//   bench backends  on a Ceph cluster: radosgw with plain S3 against our gateway over RADOS
//                 and over the local store; throughput and TTFT; gateways as a fleet
//   bench model   the reference Llama in torch (Python): TTFT with its prefix from ObjectCache
//                 against a full recompute
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>

#include "bench/bench_report.h"

namespace objectcache::bench {

// Registers `bench NAME` whose flags fill `*flags` (with a `json` member for --json PATH); when
// it is chosen, `run(*flags)` runs under RunBench. Returns the subcommand, for its own flags.
template <typename Flags, typename Run>
CLI::App* AddBench(CLI::App* bench, std::string name, std::string description,
                   const std::shared_ptr<Flags>& flags, Run run) {
  CLI::App* cmd = bench->add_subcommand(std::move(name), std::move(description));
  cmd->add_option("--json", flags->json, "Write the metrics and rows to this JSON file");
  cmd->callback([flags, run] { RunBench([&] { return run(*flags); }); });
  return cmd;
}

// Registers --dir: where a benchmark keeps its files (a ScratchRoot, bench/kv_fixture.h).
inline void AddScratchDir(CLI::App* cmd, std::string* dir) {
  cmd->add_option("--dir", *dir,
                  "Scratch directory (default: a temporary one, removed after; a named one is left "
                  "in place)");
}

// Registers --gpu: the GPU profile (engine/prefill.h) whose compute the emulated prefill of the
// TTFT runs takes.
inline void AddGpuProfile(CLI::App* cmd, std::string* gpu) {
  cmd->add_option("--gpu", *gpu, "GPU profile of the emulated prefill: h100, h200");
}

// Registers the `bench` command, with `bench keys`, `bench store`, `bench index` and the
// benchmarks below, under `app`.
void AddBenchCommands(CLI::App* app);

// Each registers one benchmark under the `bench` command: `bench s3`, `bench ttft`, ..., `bench
// model` (the Python reference model's benchmark), in the file of its name (bench/s3_bench.cc...).
void AddS3BenchCommand(CLI::App* bench);
void AddTtftBenchCommand(CLI::App* bench);
void AddSchedBenchCommand(CLI::App* bench);
void AddBackendsBenchCommand(CLI::App* bench);
void AddMemBenchCommand(CLI::App* bench);
void AddEvictBenchCommand(CLI::App* bench);
void AddTlsBenchCommand(CLI::App* bench);
void AddPathBenchCommand(CLI::App* bench);
void AddGpuBenchCommand(CLI::App* bench);
void AddNvmeKvBenchCommand(CLI::App* bench);
void AddModelBenchCommand(CLI::App* bench);

// Registers `demo`: the TTFT experiment on one model, the README's main job.
void AddDemoCommand(CLI::App* app);

}  // namespace objectcache::bench
