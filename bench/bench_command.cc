#include "bench/bench_command.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <ranges>

#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "core/hex.h"
#include "core/seeded_data.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "store/local/local_store.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

Result<ModelPreset> Model(const std::string& name) { return FindModelPreset(name); }

// ---- bench keys --------------------------------------------------------------------------

struct KeysFlags {
  size_t tokens = 131072;
  int repeats = 21;
  std::string layout = "llama-3.1-8b";
  std::string json;
};

Status RunKeys(const KeysFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset m, Model(f.layout));
  KeyNamespace ns(m.name, m.layout);
  std::vector<uint32_t> tokens = SeededTokens(f.tokens, 1);
  const std::vector<ChunkKey> reference = ns.KeysForTokens(tokens);
  std::vector<double> ours, ceiling;
  uint64_t sink = 0;
  for (int r = 0; r < f.repeats; ++r) {
    double t0 = NowSeconds();
    std::vector<ChunkKey> keys = ns.KeysForTokens(tokens);
    double t1 = NowSeconds();
    XXH128_hash_t h = XXH3_128bits(tokens.data(), tokens.size() * sizeof(uint32_t));
    double t2 = NowSeconds();
    if (keys != reference) return InternalError("key chain is not deterministic");
    sink += h.low64;
    ours.push_back(t1 - t0);
    ceiling.push_back(t2 - t1);
  }
  Report report("keys");
  report.Param("tokens", f.tokens);
  report.Param("layout", m.name);
  report.Param("repeats", f.repeats);
  report.Param("chunks", reference.size());
  const double med = Median(ours), med_ceiling = Median(ceiling);
  report.Metric("tokens_per_s", f.tokens / med, "tokens/s", "prefix hash chain, G=16");
  report.Metric("prompt_us", med * 1e6, "us", "all keys of one prompt");
  report.Metric("single_pass_tokens_per_s", f.tokens / med_ceiling, "tokens/s",
                "one XXH3-128 over all tokens (ceiling)");
  report.Metric("ratio_vs_single_pass", med_ceiling / med, "x", "");
  report.Print();
  if (sink == 42) std::cout << "";
  return report.WriteJson(f.json);
}

// ---- bench store -------------------------------------------------------------------------

struct StoreFlags {
  std::string dir;  // empty: a temporary directory (ScratchRoot)
  size_t objects = 256;
  int put_repeats = 5;
  int read_repeats = 31;
  std::string layout = "llama-3.1-8b";
  bool durable = false;
  std::string json;
};

Status WritePlainFile(const fs::path& path, std::string_view bytes, bool durable) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("creating " + path.string(), errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      ::close(fd);
      return ErrnoError("writing " + path.string(), errno);
    }
    done += static_cast<size_t>(w);
  }
  if (durable) ::fdatasync(fd);
  ::close(fd);
  return Status();
}

Status RunStore(const StoreFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset m, Model(f.layout));
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-store"));
  const fs::path& root = scratch.path();
  OC_ASSIGN_OR_RETURN(const fs::path plain, scratch.FreshSubdir("plain"));
  OC_ASSIGN_OR_RETURN(const fs::path store_dir, scratch.FreshSubdir("store"));
  LocalStoreOptions options{.root = store_dir.string(), .durable = f.durable};
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenLocalStore(options));

  KeyNamespace ns(m.name, m.layout);
  std::vector<ChunkKey> keys =
      ns.KeysForTokens(SeededTokens(f.objects * m.layout.tokens_per_chunk, 2));
  std::vector<std::string> names, objects;
  for (size_t i = 0; i < keys.size(); ++i) {
    names.push_back(keys[i].ToHex());
    std::string kv = SeededBytes(m.layout.ChunkKvBytes(), 100 + i);
    OC_ASSIGN_OR_RETURN(std::string obj, EncodeChunkObject(m.layout, keys[i], AsBytes(kv)));
    objects.push_back(std::move(obj));
  }
  const double object_mib = objects[0].size() / 1048576.0;

  // Puts, interleaved with a plain write of the same bytes to one file per object.
  std::vector<double> put_ours, put_plain;
  auto put_ours_round = [&]() -> Result<double> {
    double t0 = NowSeconds();
    for (size_t i = 0; i < keys.size(); ++i) {
      OC_RETURN_IF_ERROR(store->Put(names[i], AsBytes(objects[i])));
    }
    return keys.size() * object_mib / (NowSeconds() - t0);
  };
  auto put_plain_round = [&]() -> Result<double> {
    double t0 = NowSeconds();
    for (size_t i = 0; i < keys.size(); ++i) {
      OC_RETURN_IF_ERROR(WritePlainFile(plain / names[i], objects[i], f.durable));
    }
    return keys.size() * object_mib / (NowSeconds() - t0);
  };
  for (int r = 0; r < f.put_repeats; ++r) {
    // Alternate which goes first, so neither always meets the writeback the other caused.
    for (int side = 0; side < 2; ++side) {
      const bool ours = (side == 0) == (r % 2 == 0);
      OC_ASSIGN_OR_RETURN(double mib_per_s, ours ? put_ours_round() : put_plain_round());
      (ours ? put_ours : put_plain).push_back(mib_per_s);
    }
  }

  // One layer slice from each object: ours in one RetrieveRanges call, the ceiling a pread
  // loop over already-open files holding the same bytes.
  std::vector<int> fds;
  for (const std::string& n : names) {
    int fd = ::open((plain / n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("opening plain file", errno);
    fds.push_back(fd);
  }
  const uint64_t slice = m.layout.LayerSliceBytes();
  std::string ours_buf(keys.size() * slice, '\0'), plain_buf(keys.size() * slice, '\0');
  std::vector<RangeRead> reads(keys.size());
  std::vector<double> read_ours, read_plain;
  const ChunkHeader geometry = ChunkGeometry(m.layout, keys[0]);
  for (int r = 0; r < f.read_repeats; ++r) {
    const uint32_t layer = static_cast<uint32_t>(r) % m.layout.num_layers;
    const uint64_t offset = geometry.LayerOffset(layer);
    auto time_ours = [&] {
      for (size_t i = 0; i < keys.size(); ++i) {
        reads[i] = {.key = names[i],
                    .offset = offset,
                    .dest = AsWritableBytes(ours_buf).subspan(i * slice, slice)};
      }
      double t0 = NowSeconds();
      Status s = store->RetrieveRanges(reads);
      double t = NowSeconds() - t0;
      return s.ok() ? t : -1.0;
    };
    auto time_plain = [&] {
      double t0 = NowSeconds();
      for (size_t i = 0; i < keys.size(); ++i) {
        if (::pread(fds[i], plain_buf.data() + i * slice, slice, offset) !=
            static_cast<ssize_t>(slice)) {
          return -1.0;
        }
      }
      return NowSeconds() - t0;
    };
    // Alternate which goes first, so neither always gets the warmer cache.
    double to, tp;
    if (r % 2 == 0) {
      to = time_ours();
      tp = time_plain();
    } else {
      tp = time_plain();
      to = time_ours();
    }
    if (to < 0 || tp < 0) return InternalError("layer read failed in round " + std::to_string(r));
    for (size_t i = 0; i < keys.size(); ++i) {
      OC_RETURN_IF_ERROR(reads[i].status);
      ChunkHeader h = *DecodeChunkHeader(AsBytes(objects[i]));
      OC_RETURN_IF_ERROR(VerifyLayerSlice(h, layer, reads[i].dest));
    }
    if (ours_buf != plain_buf) return DataLossError("layer bytes differ from the plain files");
    const double gb = keys.size() * slice / 1e9;
    read_ours.push_back(gb * 8 / to);
    read_plain.push_back(gb * 8 / tp);
  }
  for (int fd : fds) ::close(fd);

  Report report("store");
  report.Param("layout", m.name);
  report.Param("objects", keys.size());
  report.Param("object_bytes", objects[0].size());
  report.Param("slice_bytes", slice);
  report.Param("durable", f.durable);
  report.Param("dir", root.string());
  report.Param("page_cache", "warm (objects just written)");
  const double po = Median(put_ours), pp = Median(put_plain);
  report.Metric("put_mib_per_s", po, "MiB/s", "2 MiB chunk objects, atomic put");
  report.Metric("put_objects_per_s", po / object_mib, "objects/s", "");
  report.Metric("plain_write_mib_per_s", pp, "MiB/s", "open+write+close, same bytes");
  report.Metric("put_ratio_vs_plain", po / pp, "x", "");
  const double ro = Median(read_ours), rp = Median(read_plain);
  report.Metric("ranged_read_gbps", ro, "Gbit/s", "1 slice x N objects, one call");
  report.Metric("pread_gbps", rp, "Gbit/s", "pread loop, files already open (ceiling)");
  report.Metric("ranged_read_ratio_vs_pread", ro / rp, "x", "");
  report.Metric("ranged_read_us_per_object", keys.size() * slice * 8 / (ro * 1e3) / keys.size(),
                "us", "");
  report.Print();
  store.reset();
  return report.WriteJson(f.json);
}

// ---- bench index -------------------------------------------------------------------------

struct IndexFlags {
  std::string dir = "./objectcache-bench-index";
  size_t objects = 1000000;
  size_t payload = 16;
  int reopens = 2;
  bool keep = false;
  std::string json;
};

std::string RandomHexName(std::mt19937_64& rng) {
  const uint64_t v[2] = {rng(), rng()};
  return EncodeHex(reinterpret_cast<const uint8_t*>(v), sizeof(v));
}

// Seconds a name of one Exist call over `names`, each expected to be `want`.
double TimeExistPerName(Store& store, const std::vector<std::string>& names, bool want) {
  std::vector<std::string_view> views(names.begin(), names.end());
  const double t0 = NowSeconds();
  Result<std::vector<bool>> found = store.Exist(views);
  const double seconds = NowSeconds() - t0;
  if (!found.has_value() || std::count(found->begin(), found->end(), want) != ssize(names)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return seconds / names.size();
}

size_t HeapInUse() {
  struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

Status RunIndex(const IndexFlags& f) {
  const fs::path root = fs::absolute(f.dir);
  // A directory that was there before the run (a store the user named) is never removed.
  const bool made_here = !fs::exists(root);
  LocalStoreOptions options{.root = root.string()};
  double populate_s = 0;
  {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenLocalStore(options));
    const uint64_t have = store->Usage().objects;
    if (have > f.objects) {
      return FailedPreconditionError(root.string() + " holds " + std::to_string(have) +
                                     " objects; remove it or pass its count");
    }
    if (have < f.objects) {
      // The names are a chain, object i's after object i-1's: a populate cut short (a full
      // disk, say) goes on from the first name missing.
      std::cout << "populating " << f.objects - have << " objects in " << root << " ..."
                << std::endl;
      KeyNamespace ns("bench", FindModelPreset("llama-3.1-8b")->layout);
      std::string payload = SeededBytes(f.payload, 5);
      ChunkKey prev;
      std::vector<uint32_t> chunk(16);
      double t0 = NowSeconds();
      for (size_t i = 0; i < f.objects; ++i) {
        chunk[0] = static_cast<uint32_t>(i);
        prev = ns.Next(prev, chunk);
        if (i < have) {
          if (i + 1 == have && !store->Stat(prev.ToHex()).has_value()) {
            return FailedPreconditionError(root.string() +
                                           " holds other objects than this "
                                           "benchmark writes; remove it");
          }
          continue;
        }
        OC_RETURN_IF_ERROR(store->Put(prev.ToHex(), AsBytes(payload)));
        if (i % 100000 == 99999) std::cout << "  " << i + 1 << std::endl;
      }
      if (have == 0) populate_s = NowSeconds() - t0;
    }
  }
  // Each round: an open after a crash (no index file: the directories are read), then a
  // restart (the index file the clean close before wrote).
  std::vector<double> restart_s, rebuild_s, scan_s, heap_per_object, close_s;
  std::vector<double> present_ns, absent_ns, stat_ns;
  uint64_t objects = 0;
  std::mt19937_64 rng(9);
  for (int r = 0; r < f.reopens; ++r) {
    for (const bool crashed : {true, false}) {
      if (crashed) fs::remove(root / "INDEX");
      ::malloc_trim(0);
      const size_t before = HeapInUse();
      LocalStoreOpenStats stats;
      OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenLocalStore(options, &stats));
      const size_t after = HeapInUse();
      objects = stats.objects;
      if (objects != f.objects) {
        return DataLossError("rebuilt " + std::to_string(objects) + " objects, expected " +
                             std::to_string(f.objects));
      }
      if (stats.index_file == crashed) {
        return InternalError(crashed ? "the index file outlived its open"
                                     : "no index file after a clean close: " +
                                           stats.index_file_refused);
      }
      if (crashed) {
        rebuild_s.push_back(stats.seconds);
        scan_s.push_back(stats.scan_seconds);
      } else {
        restart_s.push_back(stats.seconds);
        heap_per_object.push_back(static_cast<double>(after - before) / objects);
        // Lookups: 8192 names listed from a random place, 8192 random absent ones.
        ListPage page =
            *store->List({.prefix = "", .start_after = RandomHexName(rng), .max_keys = 8192});
        std::vector<std::string> present, absent;
        for (const ObjectInfo& o : page.objects) present.push_back(o.key);
        while (absent.size() < present.size()) absent.push_back(RandomHexName(rng) + "-");
        for (const ObjectInfo& o : page.objects | std::views::take(3)) {
          OC_RETURN_IF_ERROR(ReadWholeObject(*store, o.key));
        }
        for (int rep = 0; rep < 9; ++rep) {
          present_ns.push_back(TimeExistPerName(*store, present, true) * 1e9);
          absent_ns.push_back(TimeExistPerName(*store, absent, false) * 1e9);
          const double t0 = NowSeconds();
          for (const std::string& k : present) {
            if (!store->Stat(k).has_value()) return DataLossError(k + " vanished");
          }
          stat_ns.push_back((NowSeconds() - t0) / present.size() * 1e9);
        }
      }
      const double t0 = NowSeconds();
      store.reset();  // a clean close: writes the index file
      close_s.push_back(NowSeconds() - t0);
    }
  }
  Report report("index");
  report.Param("objects", objects);
  report.Param("payload_bytes", f.payload);
  report.Param("name", "32-hex chunk key");
  report.Param("dir", root.string());
  report.Param("page_cache", "warm");
  if (populate_s > 0) report.Metric("populate_puts_per_s", f.objects / populate_s, "puts/s", "");
  report.Metric("index_bytes_per_object", Median(heap_per_object), "bytes", "heap in use");
  report.Metric("restart_s", Median(restart_s), "s", "open after a clean close (index file)");
  report.Metric("rebuild_s", Median(rebuild_s), "s", "open after a crash: directories read");
  report.Metric("rebuild_scan_s", Median(scan_s), "s", "of which directory scan");
  report.Metric("close_s", Median(close_s), "s", "clean close: writes the index file");
  report.Metric("lookup_ns_present", Median(present_ns), "ns/name", "Exist, batches of 8192");
  report.Metric("lookup_ns_absent", Median(absent_ns), "ns/name", "Exist, batches of 8192");
  report.Metric("stat_ns", Median(stat_ns), "ns", "Stat of one present name");
  report.Metric("index_gib_at_1e7", Median(heap_per_object) * 1e7 / (1 << 30), "GiB", "projected");
  report.Print();
  if (!f.keep && made_here) {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  return report.WriteJson(f.json);
}

}  // namespace

void AddBenchCommands(CLI::App* app) {
  CLI::App* bench = app->add_subcommand("bench", "Benchmarks (short table; --json PATH)");
  bench->require_subcommand(1);

  auto keys = std::make_shared<KeysFlags>();
  CLI::App* k =
      AddBench(bench, "keys", "Chunk-key hashing throughput for a long prompt", keys, RunKeys);
  k->add_option("--tokens", keys->tokens, "Prompt length in tokens");
  k->add_option("--repeats,--rounds", keys->repeats, "Timed repetitions");
  k->add_option("--layout", keys->layout, "Model preset");

  auto store = std::make_shared<StoreFlags>();
  CLI::App* s = AddBench(
      bench, "store", "Local store: chunk put throughput; layer-slice reads vs a plain pread loop",
      store, RunStore);
  AddScratchDir(s, &store->dir);
  s->add_option("--objects", store->objects, "Chunk objects");
  s->add_option("--put-repeats", store->put_repeats, "Put rounds");
  s->add_option("--read-repeats", store->read_repeats, "Read rounds");
  s->add_option("--layout", store->layout, "Model preset");
  s->add_flag("--durable", store->durable, "fdatasync every object (both sides)");

  auto index = std::make_shared<IndexFlags>();
  CLI::App* i = AddBench(bench, "index",
                         "Local store index: memory per object, restart and rebuild time, lookups",
                         index, RunIndex);
  i->add_option("--dir", index->dir,
                "Store directory (removed after the run unless --keep, or unless it was there "
                "before)");
  i->add_option("--objects", index->objects, "Objects");
  i->add_option("--payload", index->payload, "Payload bytes per object");
  i->add_option("--reopens", index->reopens, "Rounds of a restart and a rebuild after a crash");
  i->add_flag("--keep", index->keep, "Keep the populated store for the next run");

  AddS3BenchCommand(bench);
  AddTtftBenchCommand(bench);
  AddMemBenchCommand(bench);
  AddSchedBenchCommand(bench);
  AddBackendsBenchCommand(bench);
  AddTlsBenchCommand(bench);
  AddPathBenchCommand(bench);
  AddNvmeKvBenchCommand(bench);
  AddEvictBenchCommand(bench);
  AddGpuBenchCommand(bench);
  AddModelBenchCommand(bench);
}

}  // namespace objectcache::bench
