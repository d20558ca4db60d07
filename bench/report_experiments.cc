// The report's own experiments, run in this process against servers it starts (bench/report.h):
// lookup latency against the number of keys (Fig. 4), throughput against object size through
// the raw store and its S3 interface (Figs. 8-9), and where the time of one retrieval goes
// (Fig. 10). Every byte they read back is checked.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/report.h"
#include "bench/svg_chart.h"
#include "core/seeded_data.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"
#include "objectcache/store_registry.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

struct PutGetRate {
  double put_mbps = 0, get_mbps = 0;
};

// Puts `count` objects of `size` bytes under `prefix`, reads each back and compares it; the
// median MB/s of each over `repeats` rounds.
Result<PutGetRate> TimePutGet(Store& store, const std::string& prefix, size_t size, size_t count,
                              int repeats) {
  std::string value = SeededBytes(size, size);
  std::string back(size, '\0');
  std::vector<double> put, get;
  for (int r = 0; r < repeats; ++r) {
    double t0 = NowSeconds();
    for (size_t i = 0; i < count; ++i) {
      std::memcpy(value.data(), &i, std::min<size_t>(8, size));  // each object its own bytes
      OC_RETURN_IF_ERROR(store.Put(prefix + std::to_string(i), AsBytes(value)));
    }
    put.push_back(static_cast<double>(size) * count / (NowSeconds() - t0) / 1e6);
    t0 = NowSeconds();
    for (size_t i = 0; i < count; ++i) {
      OC_ASSIGN_OR_RETURN(size_t n, store.Retrieve(prefix + std::to_string(i),
                                                   std::as_writable_bytes(std::span(back))));
      std::memcpy(value.data(), &i, std::min<size_t>(8, size));
      if (n != size || back != value) {
        return DataLossError("object " + std::to_string(i) + " of " + std::to_string(size) +
                             " bytes came back different");
      }
    }
    get.push_back(static_cast<double>(size) * count / (NowSeconds() - t0) / 1e6);
  }
  return PutGetRate{Median(put), Median(get)};
}

}  // namespace

// --- Fig. 4: lookup latency against the number of keys. ---

Result<std::vector<Figure>> LookupFigures(const ReportContext& ctx) {
  constexpr size_t kMaxKeys = 8192;
  const int repeats = ctx.full ? 31 : 9;
  // A one-layer layout keeps 8192 chunk objects small (8 KiB each).
  ModelPreset tiny{.name = "report-lookup",
                   .layout = {.num_layers = 1, .num_kv_heads = 1, .head_dim = 64}};
  OC_ASSIGN_OR_RETURN(ServerChild server, StartServer(fs::path(ctx.scratch) / "lookup", true));
  OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "lookup", tiny));
  OC_ASSIGN_OR_RETURN(auto client, Client::Create({.endpoints = {server.endpoint},
                                                   .bucket = "lookup",
                                                   .write_behind_bytes = 256 << 20}));
  OC_ASSIGN_OR_RETURN(PrefixSet stored, StorePrefix(tiny, kMaxKeys, 11, client.get()));
  std::vector<ChunkKey> absent(kMaxKeys);
  std::mt19937_64 rng(7);
  for (ChunkKey& k : absent) {
    ChunkKey::Bytes b;
    for (auto& byte : b) byte = static_cast<uint8_t>(rng());
    k = ChunkKey(b);
  }
  LineChart chart{
      .title = "Lookup latency against the number of keys",
      .subtitle = "one batch lookup request to objectcache serve (local store), median of " +
                  std::to_string(repeats),
      .x_label = "keys in the request",
      .y_label = "ms",
      .log_x = true,
      .log_y = true};
  LineChart::Series present{.name = "all present"}, missing{.name = "all absent"};
  Figure f{.id = "fig4",
           .title = "Fig. 4: lookup latency against the number of keys",
           .paper =
               "One batched lookup answers a whole prompt's chunk keys (up to 8192, a "
               "128K-token prompt at G=16), present or absent, without a central index.",
           .baseline = "a lookup of one key"};
  f.table_header = {"keys", "present ms", "absent ms"};
  std::map<size_t, std::pair<double, double>> by_n;  // keys -> (present, absent) ms
  for (size_t n : {1, 8, 64, 512, 4096, 8192}) {
    std::vector<double> p_ms, a_ms;
    for (int r = 0; r < repeats; ++r) {
      double t0 = NowSeconds();
      OC_ASSIGN_OR_RETURN(size_t hits, client->Lookup(std::span(stored.keys).first(n)));
      p_ms.push_back((NowSeconds() - t0) * 1000);
      if (hits != n) {
        return DataLossError("a lookup of " + std::to_string(n) + " stored keys found " +
                             std::to_string(hits));
      }
      t0 = NowSeconds();
      OC_ASSIGN_OR_RETURN(hits, client->Lookup(std::span(absent).first(n)));
      a_ms.push_back((NowSeconds() - t0) * 1000);
      if (hits != 0) return DataLossError("a lookup of absent keys found some");
    }
    by_n[n] = {Median(p_ms), Median(a_ms)};
  }
  for (const auto& [n, ms] : by_n) {
    present.points.push_back({double(n), ms.first});
    missing.points.push_back({double(n), ms.second});
    f.table_rows.push_back({std::to_string(n), Fixed(ms.first, 3), Fixed(ms.second, 3)});
    f.data["rows"].push_back({{"keys", n}, {"present_ms", ms.first}, {"absent_ms", ms.second}});
  }
  chart.series = {present, missing};
  f.svgs.push_back(LineChartSvg(chart));
  const double all = by_n[kMaxKeys].first, one = by_n[1].first;
  f.ours = "8192 present keys in " + Fixed(all, 2) + " ms, one in " + Fixed(one, 3) +
           " ms; 8192 absent in " + Fixed(by_n[kMaxKeys].second, 2) +
           " ms. Criterion for \"holds\": a 128K-token prompt's 8192 keys in one request under "
           "10 ms.";
  f.holds = YesNo(all < 10);
  return std::vector<Figure>{f};
}

// --- Figs. 8-9: throughput against object size, the raw store against its S3 interface. ---

Result<std::vector<Figure>> ObjectSizeFigures(const ReportContext& ctx) {
  const std::vector<size_t> sizes =
      ctx.full
          ? std::vector<size_t>{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}
          : std::vector<size_t>{4 << 10, 64 << 10, 1 << 20, 4 << 20};
  const double per_size = ctx.full ? 256e6 : 32e6;  // bytes written a round
  const int repeats = ctx.full ? 3 : 1;
  const fs::path scratch = fs::path(ctx.scratch) / "sizes";
  std::vector<std::pair<std::string, std::string>> backends = {
      {"memory", "mem://"}, {"local", "file://" + (scratch / "raw").string()}};
  if (!ctx.ceph_dir.empty()) {
    OC_ASSIGN_OR_RETURN(auto env, ReadCephEnv(ctx.ceph_dir));
    backends.push_back({"RADOS", env["RADOS_URI"] + "&namespace=report-sizes"});
  }
  Figure f{.id = "fig8",
           .title =
               "Figs. 8-9: throughput against object size, the raw store and its S3 "
               "interface",
           .paper =
               "Small objects cost the S3 interface most (a request per object); from "
               "about a megabyte on it carries close to what the store itself does.",
           .baseline = "the same store called directly (Put, Retrieve) in this process",
           .holds = ""};
  f.table_header = {"backend",     "object",      "raw put MB/s", "raw get MB/s",
                    "S3 PUT MB/s", "S3 GET MB/s", "S3 GET / raw"};
  double big_ratio = 1e9;
  for (const auto& [name, uri] : backends) {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> raw, OpenStore(uri));
    // The server keeps its own store of the same kind (its own directory, its own memory).
    std::string server_uri = uri;
    if (name == "local") server_uri = "file://" + (scratch / "served").string();
    OC_ASSIGN_OR_RETURN(ServerChild server,
                        StartServer(scratch / ("server-" + name), true, {"--store", server_uri}));
    OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "sizes", nullptr));
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> s3,
                        OpenStore("s3://" + server.endpoint.substr(7) + "/sizes"));
    LineChart chart{.title = name + " store: throughput against object size",
                    .subtitle = "one request at a time, every object read back and compared",
                    .x_label = "object bytes",
                    .y_label = "MB/s",
                    .log_x = true,
                    .log_y = true};
    LineChart::Series rp{.name = "raw put"}, rg{.name = "raw get"},
        sp{.name = "S3 PUT", .dashed = true}, sg{.name = "S3 GET", .dashed = true};
    for (size_t size : sizes) {
      const size_t count = std::clamp<size_t>(static_cast<size_t>(per_size / size), 8, 4096);
      const std::string prefix = "s" + std::to_string(size) + "-";
      OC_ASSIGN_OR_RETURN(PutGetRate direct, TimePutGet(*raw, prefix, size, count, repeats));
      OC_ASSIGN_OR_RETURN(PutGetRate over_s3, TimePutGet(*s3, prefix, size, count, repeats));
      rp.points.push_back({double(size), direct.put_mbps});
      rg.points.push_back({double(size), direct.get_mbps});
      sp.points.push_back({double(size), over_s3.put_mbps});
      sg.points.push_back({double(size), over_s3.get_mbps});
      const double ratio = over_s3.get_mbps / direct.get_mbps;
      if (size >= (1u << 20)) big_ratio = std::min(big_ratio, ratio);
      f.table_rows.push_back({name, std::to_string(size >> 10) + " KiB", Fixed(direct.put_mbps, 0),
                              Fixed(direct.get_mbps, 0), Fixed(over_s3.put_mbps, 0),
                              Fixed(over_s3.get_mbps, 0), Fixed(ratio, 2)});
      f.data["rows"].push_back({{"backend", name},
                                {"object_bytes", size},
                                {"objects", count},
                                {"raw_put_mbps", direct.put_mbps},
                                {"raw_get_mbps", direct.get_mbps},
                                {"s3_put_mbps", over_s3.put_mbps},
                                {"s3_get_mbps", over_s3.get_mbps}});
    }
    chart.series = {rp, rg, sp, sg};
    f.svgs.push_back(LineChartSvg(chart));
  }
  f.ours = "From 1 MiB up, S3 GETs carry at least " + Fixed(big_ratio, 2) +
           "x of the raw store's reads on every backend measured" +
           (ctx.ceph_dir.empty() ? " (memory, local; RADOS needs --ceph DIR)." : ".") +
           " Criterion: at least 0.5x.";
  f.holds = YesNo(big_ratio >= 0.5);
  return std::vector<Figure>{f};
}

// --- Fig. 10: where the time of one retrieval goes. ---

Result<std::vector<Figure>> BreakdownFigures(const ReportContext& ctx) {
  OC_ASSIGN_OR_RETURN(ModelPreset model, FindModelPreset("llama-3.1-8b"));
  const size_t chunks = ctx.full ? 1024 : 256;  // 16K or 4K tokens
  const int repeats = ctx.full ? 7 : 3;
  OC_ASSIGN_OR_RETURN(ServerChild server, StartServer(fs::path(ctx.scratch) / "breakdown", true));
  OC_RETURN_IF_ERROR(CreateBucket(server.endpoint, "breakdown", model));
  const uint64_t object_bytes = ChunkGeometry(model.layout, ChunkKey()).ObjectBytes();
  OC_ASSIGN_OR_RETURN(auto client,
                      Client::Create({.endpoints = {server.endpoint},
                                      .bucket = "breakdown",
                                      .write_behind_bytes = (chunks + 1) * object_bytes}));
  OC_ASSIGN_OR_RETURN(PrefixSet prefix, StorePrefix(model, chunks, 5, client.get()));
  const std::vector<RetrievalMode> modes = {
      RetrievalMode::kAggregatedLayerwise, RetrievalMode::kAggregatedChunkwise,
      RetrievalMode::kPlainLayerwise, RetrievalMode::kPlainChunkwise};
  const std::vector<std::string> phases = {"lookup", "request to hits known",
                                           "hits known to first layer", "remaining layers"};
  std::map<std::string, std::map<std::string, std::vector<double>>> ms;  // mode -> phase
  for (int r = 0; r < repeats; ++r) {
    for (size_t k = 0; k < modes.size(); ++k) {
      const RetrievalMode mode = modes[(k + r) % modes.size()];
      prefix.ClearRegions(chunks);
      const double t0 = NowSeconds();
      OC_ASSIGN_OR_RETURN(size_t hits, client->Lookup(prefix.keys));
      const double t1 = NowSeconds();
      if (hits != chunks) return DataLossError("the lookup missed stored chunks");
      OC_ASSIGN_OR_RETURN(auto retrieval, prefix.StartRetrieval(client.get(), mode, chunks));
      OC_RETURN_IF_ERROR(retrieval->Hits().status());
      const double t2 = NowSeconds();
      OC_RETURN_IF_ERROR(retrieval->WaitForLayer(0));
      const double t3 = NowSeconds();
      OC_RETURN_IF_ERROR(retrieval->Wait());
      const double t4 = NowSeconds();
      OC_RETURN_IF_ERROR(prefix.CheckRetrieved(*retrieval, chunks));
      auto& m = ms[RetrievalModeName(mode)];
      m["lookup"].push_back((t1 - t0) * 1e3);
      m["request to hits known"].push_back((t2 - t1) * 1e3);
      m["hits known to first layer"].push_back((t3 - t2) * 1e3);
      m["remaining layers"].push_back((t4 - t3) * 1e3);
    }
  }
  // What checking every slice costs one core: the client does it inside the transfer.
  std::vector<double> verify_ms;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = NowSeconds();
    uint64_t sink = 0;
    const uint64_t slice = model.layout.LayerSliceBytes();
    for (const PageBuffer& region : prefix.regions) {
      for (size_t c = 0; c < chunks; ++c)
        sink ^= LayerChecksum(region.bytes().subspan(c * slice, slice));
    }
    verify_ms.push_back((NowSeconds() - t0) * 1e3 + (sink == 42 ? 1e-9 : 0));
  }
  Figure f{.id = "fig10",
           .title = "Fig. 10: the latency breakdown of one retrieval",
           .paper =
               "With aggregation the request overhead is paid once, and a layerwise "
               "retrieval hands the first layer over long before the last: the wait "
               "before compute can start is the first layer, not the whole prefix.",
           .baseline =
               "the plain S3 modes (a GET per chunk, or per chunk per layer) and the "
               "chunkwise hand-over of the same server"};
  BarChart chart{.title = "One retrieval of a " + TokensTag(chunks * 16) +
                          "-token Llama-3.1-8B prefix, by phase",
                 .subtitle = "local store, loopback; medians of " + std::to_string(repeats) +
                             "; every byte checked afterwards",
                 .value_label = "ms",
                 .series = phases,
                 .stacked = true};
  f.table_header = {"mode",           "lookup",           "to hits known",
                    "to first layer", "remaining layers", "total ms"};
  std::map<std::string, double> first_wait;
  for (RetrievalMode mode : modes) {
    const std::string name = RetrievalModeName(mode);
    BarChart::Group g{.label = name};
    std::vector<std::string> row = {name};
    double total = 0;
    for (const std::string& phase : phases) {
      const double v = Median(ms[name][phase]);
      g.values[phase] = v;
      row.push_back(Fixed(v, 1));
      total += v;
      f.data[name][phase] = v;
    }
    first_wait[name] = g.values["lookup"] + g.values["request to hits known"] +
                       g.values["hits known to first layer"];
    row.push_back(Fixed(total, 1));
    chart.groups.push_back(g);
    f.table_rows.push_back(row);
  }
  f.svgs.push_back(BarChartSvg(chart));
  f.data["verify_ms_one_core"] = Median(verify_ms);
  const std::string agg = RetrievalModeName(RetrievalMode::kAggregatedLayerwise);
  const std::string plain = RetrievalModeName(RetrievalMode::kPlainLayerwise);
  f.ours = agg + " waits " + Fixed(first_wait[agg], 1) + " ms for its first layer, " + plain + " " +
           Fixed(first_wait[plain], 1) + " ms. Checking every slice (XXH3) takes one core " +
           Fixed(Median(verify_ms), 1) + " ms, inside the transfer. " +
           (ctx.machine.gpu.starts_with("none") ? "No GPU here: the device copy is not measured."
                                                : "The device copy is in bench gpu.");
  f.holds = YesNo(first_wait[agg] < first_wait[plain]);
  return std::vector<Figure>{f};
}

}  // namespace objectcache::bench
