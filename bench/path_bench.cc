// `objectcache bench path`: the data path of one aggregated layerwise retrieval (S3Agg-LW)
// against the link it runs over. In one run, interleaved: one TCP stream over loopback (the
// ceiling), and the retrieval of a Llama-3.1-8B prefix from the local store (page cache warm)
// in wire format version 1 and version 2 (docs/wire-format.md), with the CPU seconds per GiB
// the server and the client spend on it; and lookups of 1 to 8192 keys. Every retrieved byte is
// checked, outside the timing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
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
  // Retrievals of `concurrency_chunks` chunks each (all layers), wire v2, N in flight.
  std::vector<size_t> concurrency = {1, 4, 16, 64};
  size_t concurrency_chunks = 16;
  // Prompts whose first layer is timed (tokens; 16 per chunk).
  std::vector<size_t> first_layer_tokens = {4096, 16384, 65536};
  // Where the retrievals' regions start past a page boundary (16: where glibc puts a large
  // malloc'd block).
  size_t region_offset = 0;
  std::string json;
};

// A retrieval into regions of its own (one per layer of [0, layers)), of `count` chunks: chunk
// i is the stored prefix's chunk i % its length, so that a prompt longer than what is stored still
// names present chunks (the server reads and sends them as it would distinct ones).
struct OwnRetrieval {
  std::vector<PageBuffer> regions;
  std::unique_ptr<LayerwiseRetrieval> retrieval;
};

OwnRetrieval AllocateOwnRetrieval(const PrefixSet& prefix, size_t count, uint32_t layers) {
  OwnRetrieval own;
  own.regions =
      MakeRegions(layers, count * prefix.model.layout.LayerSliceBytes(), prefix.region_offset);
  return own;
}

// Zeroes `own`'s regions, so that bytes left from its last retrieval cannot pass for this one's;
// outside any timing. Regions are allocated once and reused, as an engine reuses its KV memory.
void ClearOwnRetrieval(OwnRetrieval* own) {
  for (PageBuffer& r : own->regions) std::memset(r.data(), 0, r.size());
}

// Starts the retrieval into `own`'s regions (allocated before, outside any timing).
Status StartOwnRetrieval(Client* client, const PrefixSet& prefix, OwnRetrieval* own) {
  const size_t count = own->regions[0].size() / prefix.model.layout.LayerSliceBytes();
  LayerwiseRequest req{.model = prefix.model,
                       .layers = {0, static_cast<uint32_t>(own->regions.size())}};
  for (size_t i = 0; i < count; ++i) req.keys.push_back(prefix.keys[i % prefix.keys.size()]);
  for (PageBuffer& r : own->regions) req.regions.push_back(r.bytes());
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

// What a raw stream carries. With no files: `bytes` from one 4 MiB buffer sent over and over and
// received into another (both stay in the CPU's cache: the link's ceiling). With files: those
// files whole, sent by sendfile from the page cache, each byte received once into `region`
// (as the retrieval's bytes leave the page cache and land in regions that are not in cache).
struct RawSource {
  uint64_t bytes = 0;
  std::vector<std::filesystem::path> files;
  std::span<std::byte> region;
};

// A raw stream's writes and reads are at most this long.
constexpr size_t kPiece = 4 << 20;

// Sends `source` over one TCP connection on 127.0.0.1, in pieces of up to kPiece; false if the
// connection failed.
bool SendRaw(int s, const RawSource& source) {
  if (source.files.empty()) {
    std::string buf(kPiece, 'x');
    for (uint64_t sent = 0; sent < source.bytes;) {
      const ssize_t n = send(s, buf.data(), std::min<uint64_t>(kPiece, source.bytes - sent), 0);
      if (n <= 0) return false;
      sent += static_cast<uint64_t>(n);
    }
    return true;
  }
  for (const std::filesystem::path& file : source.files) {
    const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st {};
    bool ok = fstat(fd, &st) == 0;
    for (off_t at = 0; ok && at < st.st_size;) {
      ok = sendfile(s, fd, &at, std::min<uint64_t>(kPiece, st.st_size - at)) > 0;
    }
    close(fd);
    if (!ok) return false;
  }
  return true;
}

Result<RawStream> RunRawStream(const RawSource& source) {
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
  RawStream out;
  const double gib = static_cast<double>(source.bytes) / kGiB;
  std::thread sender([&] {
    const double cpu0 = CpuSeconds(RUSAGE_THREAD);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) SendRaw(s, source);
    close(s);
    out.sender_cpu = (CpuSeconds(RUSAGE_THREAD) - cpu0) / gib;
  });
  const int conn = accept(listener, nullptr, nullptr);
  close(listener);
  std::string buf(source.region.empty() ? kPiece : 0, '\0');
  uint64_t got = 0;
  const double t0 = NowSeconds(), cpu0 = CpuSeconds(RUSAGE_THREAD);
  while (conn >= 0 && got < source.bytes) {
    char* into =
        source.region.empty() ? buf.data() : reinterpret_cast<char*>(source.region.data() + got);
    const ssize_t n = recv(conn, into, std::min<uint64_t>(kPiece, source.bytes - got), 0);
    if (n <= 0) break;
    got += static_cast<uint64_t>(n);
  }
  const double seconds = NowSeconds() - t0;
  out.receiver_cpu = (CpuSeconds(RUSAGE_THREAD) - cpu0) / gib;
  if (conn >= 0) close(conn);
  sender.join();
  if (got != source.bytes) return UnavailableError("raw stream: the connection ended early");
  out.gbps = static_cast<double>(source.bytes) * 8 / seconds / 1e9;
  return out;
}

// The files of a local store under `root` that hold chunk objects of at least `min_bytes`.
std::vector<std::filesystem::path> ChunkFiles(const std::filesystem::path& root, uint64_t min_bytes,
                                              uint64_t* total) {
  std::vector<std::filesystem::path> files;
  *total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.is_regular_file() && entry.file_size() >= min_bytes) {
      files.push_back(entry.path());
      *total += entry.file_size();
    }
  }
  return files;
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
  if (f.region_offset >= kPageBytes) {
    return InvalidArgumentError("--region-offset takes 0 to " + std::to_string(kPageBytes - 1));
  }
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
  if (f.region_offset != 0) {  // StorePrefix allocated them on a page boundary
    prefix.region_offset = f.region_offset;
    prefix.AllocateRegions(f.chunks);
  }
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

  // N retrievals in flight through one client (a connection each), wire v2, until as many as
  // the largest N have run: the aggregate rate sustained at that concurrency. Every level moves
  // the same bytes into the same regions (allocated once, zeroed before the clock starts), so
  // only N differs (a burst of one 32 MiB retrieval lasts a few milliseconds, within the
  // machine's scheduling noise); each round starts at the next level, so none always runs first.
  // A finished retrieval is waited for in the order they started, and its place taken at once.
  const size_t cc_chunks = std::min(f.concurrency_chunks, f.chunks);
  const uint64_t cc_bytes =
      uint64_t{cc_chunks} * model.layout.LayerSliceBytes() * model.layout.num_layers;
  const size_t cc_total = std::ranges::max(f.concurrency);
  std::vector<std::vector<double>> cc_gbps(f.concurrency.size()),
      cc_server_cpu(f.concurrency.size()), cc_client_cpu(f.concurrency.size());
  std::vector<OwnRetrieval> own(cc_total);
  for (OwnRetrieval& o : own) o = AllocateOwnRetrieval(prefix, cc_chunks, model.layout.num_layers);
  auto concurrent = [&](int round) -> Status {
    const pid_t pid = cases[1].server->process->pid();
    for (size_t i = 0; i < f.concurrency.size(); ++i) {
      const size_t k = (round + i) % f.concurrency.size();
      for (OwnRetrieval& o : own) ClearOwnRetrieval(&o);
      const double client0 = CpuSeconds(RUSAGE_SELF), server0 = ProcessCpuSeconds(pid);
      const double t0 = NowSeconds();
      size_t started = 0;
      for (; started < f.concurrency[k]; ++started) {
        OC_RETURN_IF_ERROR(StartOwnRetrieval(cases[1].client.get(), prefix, &own[started]));
      }
      for (OwnRetrieval& o : own) {
        OC_RETURN_IF_ERROR(o.retrieval->Wait());
        o.retrieval.reset();
        if (started < cc_total) {
          OC_RETURN_IF_ERROR(StartOwnRetrieval(cases[1].client.get(), prefix, &own[started++]));
        }
      }
      const double seconds = NowSeconds() - t0;
      const double moved = static_cast<double>(cc_bytes * cc_total);
      const double cc_gib = moved / kGiB;
      cc_gbps[k].push_back(moved * 8 / seconds / 1e9);
      cc_server_cpu[k].push_back((ProcessCpuSeconds(pid) - server0) / cc_gib);
      cc_client_cpu[k].push_back((CpuSeconds(RUSAGE_SELF) - client0) / cc_gib);
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
  std::vector<OwnRetrieval> first_layer_own;
  for (size_t tokens : f.first_layer_tokens) {
    const size_t count = std::max<size_t>(1, tokens / kTokensPerChunk);
    first_layer_own.push_back(AllocateOwnRetrieval(prefix, count, 1));
  }
  auto first_layers = [&]() -> Status {
    for (size_t k = 0; k < f.first_layer_tokens.size(); ++k) {
      OwnRetrieval& o = first_layer_own[k];
      ClearOwnRetrieval(&o);
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
  // The raw streams: from cache to cache, and the prefix's chunk files into one region.
  RawSource files_source;
  files_source.files =
      ChunkFiles(scratch.path() / "sendfile",
                 model.layout.LayerSliceBytes() * model.layout.num_layers, &files_source.bytes);
  if (files_source.files.size() != f.chunks) {
    return InternalError("found " + std::to_string(files_source.files.size()) + " of " +
                         std::to_string(f.chunks) + " chunk files in the store");
  }
  PageBuffer files_region(files_source.bytes, f.region_offset);
  files_source.region = files_region.bytes();
  const RawSource sources[] = {{.bytes = bytes}, files_source};
  struct RawRuns {
    std::vector<double> gbps, sender_cpu, receiver_cpu;
  } raw[std::size(sources)];
  constexpr int kCases = std::size(sources) + std::size(cases);  // raw streams, then each case
  for (int round = 0; round < f.rounds; ++round) {
    // Rotating order: raw, raw files, v1, v2, copied; then raw files, v1, ..., raw; and so on.
    for (int k = 0; k < kCases; ++k) {
      const size_t which = (round + k) % kCases;
      if (which < std::size(sources)) {
        OC_ASSIGN_OR_RETURN(RawStream r, RunRawStream(sources[which]));
        raw[which].gbps.push_back(r.gbps);
        raw[which].sender_cpu.push_back(r.sender_cpu);
        raw[which].receiver_cpu.push_back(r.receiver_cpu);
      } else {
        OC_RETURN_IF_ERROR(retrieve(cases[which - std::size(sources)]));
      }
    }
    OC_RETURN_IF_ERROR(lookups());
    OC_RETURN_IF_ERROR(concurrent(round));
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
  report.Param("region_offset", std::to_string(f.region_offset) + " bytes past a page boundary");
  const double raw_gbps = Median(raw[0].gbps), files_gbps = Median(raw[1].gbps);
  report.Metric("raw_stream_gbps", raw_gbps, "Gbit/s",
                "one TCP stream over 127.0.0.1, from cache to cache");
  report.Metric("raw_sender_cpu_s_per_gib", Median(raw[0].sender_cpu), "s/GiB",
                "the raw stream's sender: a server's floor on loopback");
  report.Metric("raw_receiver_cpu_s_per_gib", Median(raw[0].receiver_cpu), "s/GiB",
                "the raw stream's receiver: a client's floor on loopback");
  report.Metric("raw_files_gbps", files_gbps, "Gbit/s",
                "the prefix's chunk files by sendfile, each byte received once into memory");
  report.Metric("raw_files_sender_cpu_s_per_gib", Median(raw[1].sender_cpu), "s/GiB");
  report.Metric("raw_files_receiver_cpu_s_per_gib", Median(raw[1].receiver_cpu), "s/GiB");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  // A row of the table: its rate against both raw streams, and the CPU of each end.
  auto print_row = [&](const char* name, double gbps, double sender_cpu, double receiver_cpu) {
    std::printf("%-10s %10.2f %12.2f %12.2f %22.3f %22.3f\n", name, gbps,
                raw_gbps > 0 ? gbps / raw_gbps : 0, files_gbps > 0 ? gbps / files_gbps : 0,
                sender_cpu, receiver_cpu);
  };
  std::printf("\n%-10s %10s %12s %12s %22s %22s\n", "wire", "Gbit/s", "vs raw", "vs files",
              "server CPU s/GiB", "client CPU s/GiB");
  print_row("raw", raw_gbps, Median(raw[0].sender_cpu), Median(raw[0].receiver_cpu));
  print_row("raw files", files_gbps, Median(raw[1].sender_cpu), Median(raw[1].receiver_cpu));
  for (const Case& c : cases) {
    const double g = Median(c.runs.gbps), s = Median(c.runs.server_cpu),
                 cpu = Median(c.runs.client_cpu);
    const double ratio = raw_gbps > 0 ? g / raw_gbps : 0;
    const double ratio_files = files_gbps > 0 ? g / files_gbps : 0;
    print_row(c.name, g, s, cpu);
    rows.push_back({{"case", c.name},
                    {"wire_version", c.wire_version},
                    {"agg_gbps", g},
                    {"ratio_vs_raw", ratio},
                    {"ratio_vs_raw_files", ratio_files},
                    {"server_cpu_s_per_gib", s},
                    {"client_cpu_s_per_gib", cpu}});
    report.Metric(std::string("agg_gbps") + c.suffix, g, "Gbit/s",
                  std::string("S3Agg-LW, ") + c.name);
    report.Metric(std::string("ratio_vs_raw") + c.suffix, ratio, "x");
    report.Metric(std::string("ratio_vs_raw_files") + c.suffix, ratio_files, "x");
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
    print_row(("v2 x" + n).c_str(), Median(cc_gbps[k]), Median(cc_server_cpu[k]),
              Median(cc_client_cpu[k]));
    report.Metric("agg_gbps_c" + n, Median(cc_gbps[k]), "Gbit/s",
                  n + " retrievals of " + std::to_string(cc_chunks) + " chunks in flight, " +
                      std::to_string(cc_total) + " in all, v2");
    rows.push_back({{"concurrency", f.concurrency[k]},
                    {"agg_gbps", Median(cc_gbps[k])},
                    {"server_cpu_s_per_gib", Median(cc_server_cpu[k])},
                    {"client_cpu_s_per_gib", Median(cc_client_cpu[k])}});
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
  return report.WriteJson(f.json, std::move(rows));
}

}  // namespace

void AddPathBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<PathBenchFlags>();
  CLI::App* p = AddBench(
      bench, "path",
      "One aggregated layerwise retrieval against one raw TCP stream; wire v1 beside v2 (sent by "
      "sendfile and copied), with the CPU seconds per GiB of server and client",
      f, RunPathBench);
  AddScratchDir(p, &f->dir);
  p->add_option("--chunks", f->chunks, "Chunks of llama-3.1-8b in the prefix (2 MiB each)");
  p->add_option("--rounds,--repeats", f->rounds, "Repeats of each case (interleaved)");
  p->add_option("--concurrency", f->concurrency,
                "Retrievals in flight (agg_gbps_cN); each level runs as many as the largest");
  p->add_option("--concurrency-chunks", f->concurrency_chunks,
                "Chunks in each of the concurrent retrievals");
  p->add_option("--first-layer-tokens", f->first_layer_tokens,
                "Prompt lengths whose first layer is timed (first_layer_ms_N)");
  p->add_option("--region-offset", f->region_offset,
                "Bytes past a page boundary where each destination region starts (16: as malloc "
                "places a large block)");
}

}  // namespace objectcache::bench
