// `objectcache bench path`: the data path of one aggregated layerwise retrieval (S3Agg-LW)
// against the link it runs over. In one run, interleaved: one TCP stream over loopback (the
// ceiling), and the retrieval of a Llama-3.1-8B prefix from the local store (page cache warm)
// in wire format version 1 and version 2 (docs/wire-format.md), with the CPU seconds per GiB
// the server and the client spend on it; and lookups of 1 to 8192 keys. Every retrieved byte is
// checked, outside the timing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "objectcache/chunk_object.h"

namespace objectcache::bench {
namespace {

struct PathBenchFlags {
  std::string dir;
  size_t chunks = 512;  // x 2 MiB of Llama-3.1-8B KV: 1 GiB
  int rounds = 5;
  // Concurrent retrievals of `concurrency_chunks` chunks each (all layers), wire v2.
  std::vector<size_t> concurrency = {1, 4, 16, 64};
  size_t concurrency_chunks = 16;
  // Prompts whose first layer is timed (tokens; 16 per chunk).
  std::vector<size_t> first_layer_tokens = {4096, 16384, 65536};
  std::string json;
};

// A retrieval into regions of its own (one per layer of [0, layers)), of `count` chunks: chunk
// i is the stored prefix's chunk i % its length, so that a prompt longer than what is stored still
// names present chunks (the server reads and sends them as it would distinct ones).
struct OwnRetrieval {
  std::vector<std::string> regions;
  std::unique_ptr<LayerwiseRetrieval> retrieval;
};

OwnRetrieval AllocateOwnRetrieval(const PrefixSet& prefix, size_t count, uint32_t layers) {
  OwnRetrieval own;
  own.regions.assign(layers, std::string(count * prefix.model.layout.LayerSliceBytes(), '\0'));
  return own;
}

// Starts the retrieval into `own`'s regions (allocated before, outside any timing).
Status StartOwnRetrieval(Client* client, const PrefixSet& prefix, OwnRetrieval* own) {
  const size_t count = own->regions[0].size() / prefix.model.layout.LayerSliceBytes();
  LayerwiseRequest req{.model = prefix.model,
                       .layers = {0, static_cast<uint32_t>(own->regions.size())}};
  for (size_t i = 0; i < count; ++i) req.keys.push_back(prefix.keys[i % prefix.keys.size()]);
  for (std::string& r : own->regions) req.regions.push_back(AsWritableBytes(r));
  OC_ASSIGN_OR_RETURN(own->retrieval, client->RetrieveLayerwise(std::move(req)));
  return Status();
}

constexpr size_t kTokensPerChunk = KvLayout::kDefaultTokensPerChunk;  // llama-3.1-8b's
constexpr std::array<size_t, 4> kLookupSizes = {1, 64, 1024, 8192};

// One raw stream: its Gbit/s, and the CPU seconds per GiB its sender and its receiver spent
// (the floor under a server's and a client's: on loopback the kernel's TCP work for both ends
// is charged to whichever thread runs it).
struct RawStream {
  double gbps = 0, sender_cpu = 0, receiver_cpu = 0;
};

// `bytes` sent over one TCP connection on 127.0.0.1, 4 MiB writes and reads.
Result<RawStream> RunRawStream(uint64_t bytes) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) close(listener);
    return UnavailableError("raw stream: no listening socket on 127.0.0.1");
  }
  constexpr size_t kPiece = 4 << 20;
  RawStream out;
  const double gib = static_cast<double>(bytes) / kGiB;
  std::thread sender([&] {
    const double cpu0 = CpuSeconds(RUSAGE_THREAD);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      std::string buf(kPiece, 'x');
      for (uint64_t sent = 0; sent < bytes;) {
        const ssize_t n = send(s, buf.data(), std::min<uint64_t>(kPiece, bytes - sent), 0);
        if (n <= 0) break;
        sent += static_cast<uint64_t>(n);
      }
    }
    close(s);
    out.sender_cpu = (CpuSeconds(RUSAGE_THREAD) - cpu0) / gib;
  });
  const int conn = accept(listener, nullptr, nullptr);
  close(listener);
  std::string buf(kPiece, '\0');
  uint64_t got = 0;
  const double t0 = NowSeconds(), cpu0 = CpuSeconds(RUSAGE_THREAD);
  while (conn >= 0 && got < bytes) {
    const ssize_t n = recv(conn, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    got += static_cast<uint64_t>(n);
  }
  const double seconds = NowSeconds() - t0;
  out.receiver_cpu = (CpuSeconds(RUSAGE_THREAD) - cpu0) / gib;
  if (conn >= 0) close(conn);
  sender.join();
  if (got != bytes) return UnavailableError("raw stream: the connection ended early");
  out.gbps = static_cast<double>(bytes) * 8 / seconds / 1e9;
  return out;
}

struct Runs {
  std::vector<double> gbps, server_cpu, client_cpu;  // CPU seconds per GiB
};

// The retrievals compared: wire v1 (always copied: its server verifies every slice), v2 with
// slices sent from the page cache by sendfile (the default), and v2 copied through a buffer
// (`serve --no-sendfile`, as over TLS), each against its own server.
struct Case {
  const char* name;
  int wire_version;
  const char* suffix;  // of its metric names; the default path's are unsuffixed
  ServerChild* server;
  std::unique_ptr<Client> client;
  Runs runs;
};

Status RunPathBench(const PathBenchFlags& f) {
  if (f.chunks == 0 || f.chunks > 8192 || f.rounds < 1) {
    return InvalidArgumentError("--chunks must be 1 to 8192 and --rounds at least 1");
  }
  for (size_t n : f.concurrency) {
    if (n == 0 || n > 256) return InvalidArgumentError("--concurrency takes 1 to 256");
  }
  for (size_t t : f.first_layer_tokens) {
    if (t == 0 || t > 8192 * kTokensPerChunk) {
      return InvalidArgumentError("--first-layer-tokens takes 1 to " +
                                  std::to_string(8192 * kTokensPerChunk) + " tokens");
    }
  }
  if (f.concurrency_chunks == 0) return InvalidArgumentError("--concurrency-chunks must be >= 1");
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-path"));
  const ModelPreset model = *FindModelPreset("llama-3.1-8b");
  OC_ASSIGN_OR_RETURN(ServerChild server, StartServer(scratch.path() / "sendfile", true));
  OC_ASSIGN_OR_RETURN(ServerChild copier,
                      StartServer(scratch.path() / "copied", true, {"--no-sendfile"}));
  Case cases[] = {{"v1", 1, "_v1", &server, nullptr, {}},
                  {"v2", 2, "", &server, nullptr, {}},
                  {"v2 copied", 2, "_copied", &copier, nullptr, {}}};
  for (Case& c : cases) {
    OC_RETURN_IF_ERROR(CreateBucket(c.server->endpoint, "path", model));
    OC_ASSIGN_OR_RETURN(c.client, Client::Create({.endpoints = {c.server->endpoint},
                                                  .bucket = "path",
                                                  .wire_version = c.wire_version}));
  }
  OC_ASSIGN_OR_RETURN(PrefixSet prefix, StorePrefix(model, f.chunks, 17,
                                                    {ClientSink(cases[1].client.get()),
                                                     ClientSink(cases[2].client.get())}));
  const uint64_t bytes =
      uint64_t{f.chunks} * model.layout.LayerSliceBytes() * model.layout.num_layers;
  const double gib = static_cast<double>(bytes) / kGiB;

  // One retrieval; its Gbit/s and CPU per GiB, then every byte checked.
  auto retrieve = [&](Case& c) -> Status {
    prefix.ClearRegions(f.chunks);
    const pid_t pid = c.server->process->pid();
    const double client0 = CpuSeconds(RUSAGE_SELF), server0 = ProcessCpuSeconds(pid);
    const double t0 = NowSeconds();
    OC_ASSIGN_OR_RETURN(
        std::unique_ptr<LayerwiseRetrieval> r,
        prefix.StartRetrieval(c.client.get(), RetrievalMode::kAggregatedLayerwise, f.chunks));
    OC_RETURN_IF_ERROR(r->Wait());
    const double seconds = NowSeconds() - t0;
    c.runs.gbps.push_back(static_cast<double>(bytes) * 8 / seconds / 1e9);
    c.runs.server_cpu.push_back((ProcessCpuSeconds(pid) - server0) / gib);
    c.runs.client_cpu.push_back((CpuSeconds(RUSAGE_SELF) - client0) / gib);
    return prefix.CheckRetrieved(*r, f.chunks);
  };
  // Lookups: 8192 chunks of a tiny layout (one layer, 512-byte slices) in a bucket of their
  // own, so a lookup of N keys finds all N present.
  OC_ASSIGN_OR_RETURN(ModelPreset tiny,
                      ParseModelJson(R"({"name": "bench-path-tiny", "layers": 1, "kv_heads": 1,
                                         "head_dim": 8, "dtype": "fp16"})"));
  OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "lookup", tiny));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> looker,
                      Client::Create({.endpoints = {server.endpoint}, .bucket = "lookup"}));
  OC_ASSIGN_OR_RETURN(PrefixSet present, StorePrefix(tiny, kLookupSizes.back(), 23, looker.get()));
  std::vector<double> lookup_ms[kLookupSizes.size()];
  auto lookups = [&]() -> Status {
    for (size_t i = 0; i < kLookupSizes.size(); ++i) {
      const double t0 = NowSeconds();
      OC_ASSIGN_OR_RETURN(size_t found,
                          looker->Lookup(std::span(present.keys).first(kLookupSizes[i])));
      lookup_ms[i].push_back((NowSeconds() - t0) * 1000);
      if (found != kLookupSizes[i]) {
        return DataLossError("lookup found " + std::to_string(found) + " of " +
                             std::to_string(kLookupSizes[i]) + " stored keys");
      }
    }
    return Status();
  };

  // N retrievals at once through one client (a connection each), wire v2: their aggregate rate.
  const size_t cc_chunks = std::min(f.concurrency_chunks, f.chunks);
  const uint64_t cc_bytes =
      uint64_t{cc_chunks} * model.layout.LayerSliceBytes() * model.layout.num_layers;
  std::vector<std::vector<double>> cc_gbps(f.concurrency.size());
  auto concurrent = [&]() -> Status {
    for (size_t k = 0; k < f.concurrency.size(); ++k) {
      std::vector<OwnRetrieval> own;
      for (size_t i = 0; i < f.concurrency[k]; ++i) {
        own.push_back(AllocateOwnRetrieval(prefix, cc_chunks, model.layout.num_layers));
      }
      const double t0 = NowSeconds();
      for (OwnRetrieval& o : own) {
        OC_RETURN_IF_ERROR(StartOwnRetrieval(cases[1].client.get(), prefix, &o));
      }
      for (OwnRetrieval& o : own) OC_RETURN_IF_ERROR(o.retrieval->Wait());
      const double seconds = NowSeconds() - t0;
      cc_gbps[k].push_back(static_cast<double>(cc_bytes * own.size()) * 8 / seconds / 1e9);
      for (const OwnRetrieval& o : own)
        OC_RETURN_IF_ERROR(
            prefix.CheckRegions(o.regions, o.regions[0].size() / model.layout.LayerSliceBytes()));
    }
    return Status();
  };
  // The wait for the first layer of a prompt of N tokens: from the request to layer 0 in place
  // and verified. The request names layer 0 only: the first frame of a request for every layer
  // is the same bytes, sent the same way, and a 64K-token prompt's every layer (8 GiB) would
  // not fit beside the rest in this machine's memory.
  std::vector<std::vector<double>> first_layer_ms(f.first_layer_tokens.size());
  auto first_layers = [&]() -> Status {
    for (size_t k = 0; k < f.first_layer_tokens.size(); ++k) {
      const size_t count = std::max<size_t>(1, f.first_layer_tokens[k] / kTokensPerChunk);
      OwnRetrieval o = AllocateOwnRetrieval(prefix, count, 1);
      const double t0 = NowSeconds();
      OC_RETURN_IF_ERROR(StartOwnRetrieval(cases[1].client.get(), prefix, &o));
      OC_RETURN_IF_ERROR(o.retrieval->WaitForLayer(0));
      first_layer_ms[k].push_back((NowSeconds() - t0) * 1000);
      OC_RETURN_IF_ERROR(o.retrieval->Wait());
      OC_RETURN_IF_ERROR(
          prefix.CheckRegions(o.regions, o.regions[0].size() / model.layout.LayerSliceBytes()));
    }
    return Status();
  };

  // Warms the page cache of both stores; not counted.
  for (Case& c : cases) {
    OC_RETURN_IF_ERROR(retrieve(c));
    c.runs = {};
  }
  constexpr int kCases = 1 + std::size(cases);  // the raw stream, then each case
  std::vector<double> raw, raw_sender_cpu, raw_receiver_cpu;
  for (int round = 0; round < f.rounds; ++round) {
    // Rotating order: raw, v1, v2, copied; then v1, v2, copied, raw; and so on.
    for (int k = 0; k < kCases; ++k) {
      const int which = (round + k) % kCases;
      if (which == 0) {
        OC_ASSIGN_OR_RETURN(RawStream r, RunRawStream(bytes));
        raw.push_back(r.gbps);
        raw_sender_cpu.push_back(r.sender_cpu);
        raw_receiver_cpu.push_back(r.receiver_cpu);
      } else {
        OC_RETURN_IF_ERROR(retrieve(cases[which - 1]));
      }
    }
    OC_RETURN_IF_ERROR(lookups());
    OC_RETURN_IF_ERROR(concurrent());
    OC_RETURN_IF_ERROR(first_layers());
  }
  server.process->Stop();
  copier.process->Stop();

  Report report("path");
  report.Param("prefix", std::to_string(f.chunks) + " chunks of llama-3.1-8b (" +
                             std::to_string(gib) + " GiB), all 32 layers");
  report.Param("rounds", f.rounds);
  report.Param("server", "objectcache serve --anonymous, local store, page cache warm");
  report.Param("client", "the client library, S3Agg-LW, one stream, into host memory");
  const double raw_gbps = Median(raw);
  report.Metric("raw_stream_gbps", raw_gbps, "Gbit/s", "one TCP stream over 127.0.0.1");
  report.Metric("raw_sender_cpu_s_per_gib", Median(raw_sender_cpu), "s/GiB",
                "the raw stream's sender: a server's floor on loopback");
  report.Metric("raw_receiver_cpu_s_per_gib", Median(raw_receiver_cpu), "s/GiB",
                "the raw stream's receiver: a client's floor on loopback");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf("\n%-10s %10s %12s %22s %22s\n", "wire", "Gbit/s", "vs raw", "server CPU s/GiB",
              "client CPU s/GiB");
  for (const Case& c : cases) {
    const double g = Median(c.runs.gbps), s = Median(c.runs.server_cpu),
                 cpu = Median(c.runs.client_cpu);
    const double ratio = raw_gbps > 0 ? g / raw_gbps : 0;
    std::printf("%-10s %10.2f %12.2f %22.3f %22.3f\n", c.name, g, ratio, s, cpu);
    rows.push_back({{"case", c.name},
                    {"wire_version", c.wire_version},
                    {"agg_gbps", g},
                    {"ratio_vs_raw", ratio},
                    {"server_cpu_s_per_gib", s},
                    {"client_cpu_s_per_gib", cpu}});
    report.Metric(std::string("agg_gbps") + c.suffix, g, "Gbit/s",
                  std::string("S3Agg-LW, ") + c.name);
    report.Metric(std::string("ratio_vs_raw") + c.suffix, ratio, "x");
    report.Metric(std::string("server_cpu_s_per_gib") + c.suffix, s, "s/GiB");
    report.Metric(std::string("client_cpu_s_per_gib") + c.suffix, cpu, "s/GiB");
  }
  for (size_t i = 0; i < kLookupSizes.size(); ++i) {
    const std::string n = std::to_string(kLookupSizes[i]);
    report.Metric("lookup_ms_" + n, Median(lookup_ms[i]), "ms", "lookup of " + n + " present keys");
    rows.push_back({{"lookup_keys", kLookupSizes[i]}, {"lookup_ms", Median(lookup_ms[i])}});
  }
  for (size_t k = 0; k < f.concurrency.size(); ++k) {
    const std::string n = std::to_string(f.concurrency[k]);
    report.Metric("agg_gbps_c" + n, Median(cc_gbps[k]), "Gbit/s",
                  n + " retrievals of " + std::to_string(cc_chunks) + " chunks at once, v2");
    rows.push_back({{"concurrency", f.concurrency[k]}, {"agg_gbps", Median(cc_gbps[k])}});
  }
  for (size_t k = 0; k < f.first_layer_tokens.size(); ++k) {
    const std::string n = std::to_string(f.first_layer_tokens[k]);
    report.Metric("first_layer_ms_" + n, Median(first_layer_ms[k]), "ms",
                  "request to layer 0 in place, " + n + " tokens, v2");
    rows.push_back(
        {{"first_layer_tokens", f.first_layer_tokens[k]}, {"ms", Median(first_layer_ms[k])}});
  }
  const double v1_cpu = Median(cases[0].runs.server_cpu);
  report.Metric("server_cpu_v2_vs_v1", v1_cpu > 0 ? Median(cases[1].runs.server_cpu) / v1_cpu : 0,
                "x", "target <= 1/3");
  report.Print();
  nlohmann::ordered_json j = report.ToJson();
  j["rows"] = rows;
  return WriteJsonFile(f.json, j);
}

}  // namespace

void AddPathBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<PathBenchFlags>();
  CLI::App* p = bench->add_subcommand(
      "path",
      "One aggregated layerwise retrieval against one raw TCP stream; wire v1 beside v2 (sent by "
      "sendfile and copied), with the CPU seconds per GiB of server and client");
  p->add_option("--dir", f->dir, "Scratch directory (default: a temporary one; removed)");
  p->add_option("--chunks", f->chunks, "Chunks of llama-3.1-8b in the prefix (2 MiB each)")
      ->capture_default_str();
  p->add_option("--rounds", f->rounds, "Repeats of each case (interleaved)")->capture_default_str();
  p->add_option("--concurrency", f->concurrency, "Retrievals at once (agg_gbps_cN)")
      ->capture_default_str();
  p->add_option("--concurrency-chunks", f->concurrency_chunks,
                "Chunks in each of the concurrent retrievals")
      ->capture_default_str();
  p->add_option("--first-layer-tokens", f->first_layer_tokens,
                "Prompt lengths whose first layer is timed (first_layer_ms_N)")
      ->capture_default_str();
  p->add_option("--json", f->json, "Write the metrics and rows to this JSON file");
  p->callback([f] { RunBench([&] { return RunPathBench(*f); }); });
}

}  // namespace objectcache::bench
