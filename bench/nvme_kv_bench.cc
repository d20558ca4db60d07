// `objectcache bench nvme-kv`: Retrieve of 64 KiB and 2 MiB values and Exist through the NVMe-KV
// controller (`objectcache nvme-kv serve`, a child process, reached through shared memory),
// beside the same reads as S3 GETs and HEADs against `objectcache serve` (a child process on
// the same store) and as direct store calls in this process, at queue depths 1, 16 and 256,
// interleaved round by round; over file:// and, with --ceph DIR, rados://.
//
// The objects are PUT through the gateway into bucket `nvmebench`, under their keys' hex names;
// the controller runs with --prefix nvmebench/, so it reads the store objects the gateway
// serves. Over RADOS all three paths read the same objects; a local store belongs to one
// process, so over file:// the controller's and the direct calls' stores are directories of
// their own beside the gateway's, holding the same values under the same names. Every value
// read is compared with what was stored.
//
// Depth D: the NVMe path keeps D commands in flight from min(D, --nvme-threads) threads (2: one
// per core here; threads that wait by polling gain nothing past the cores), each on a queue
// pair of its own, resubmitting the commands that completed in one pass as one batch (one
// doorbell); the S3 and direct paths run D threads, one blocking request each at a time. A
// command's latency is from its submission to the pass that saw its completion.
#include <sys/mman.h>
#include <sys/prctl.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "nvmekv/host.h"
#include "objectcache/store_registry.h"
#include "s3/s3_connection.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;
using nvmekv::Key;

constexpr char kBucket[] = "nvmebench";

struct NvmeKvBenchFlags {
  std::string dir;
  std::string ceph_dir;
  std::vector<std::string> sizes = {"64KiB", "2MiB"};
  std::vector<int> depths = {1, 16, 256};
  int objects = 32;
  int nvme_threads = 2;
  int controller_workers = 16;
  int controller_busy_poll_us = 1000;
  double seconds = 1;
  int rounds = 3;
  std::string json;
};

struct Op {
  std::string name;   // "retrieve_64k", "exist"
  uint64_t size = 0;  // 0 for exist
  std::vector<Key> keys;
  std::vector<std::string> values;
};

struct Sample {
  double ops_per_s = 0;
  double p50_us = 0, p99_us = 0;
  double doorbells_per_command = 0;
};

// The rate and latency percentiles of `done` operations in `seconds`, latencies per thread.
Sample Summarize(const std::vector<std::vector<double>>& latencies, uint64_t done, double seconds) {
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  Sample s;
  s.ops_per_s = static_cast<double>(done) / seconds;
  s.p50_us = Percentile(all, 0.5);
  s.p99_us = Percentile(all, 0.99);
  return s;
}

// Runs body(thread, latencies) on `threads` threads until `seconds` pass; body returns the
// commands it completed (negative: an error, which stops the run).
Result<Sample> Drive(int threads, double seconds,
                     const std::function<Result<int>(int, std::vector<double>*)>& body) {
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  Status first_error;
  std::mutex mu;
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  const double t0 = NowSeconds(), end = t0 + seconds;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      while (!failed && NowSeconds() < end) {
        Result<int> n = body(t, &lat[static_cast<size_t>(t)]);
        if (!n.ok()) {
          std::lock_guard l(mu);
          if (!failed.exchange(true)) first_error = n.status();
          return;
        }
        done += static_cast<uint64_t>(*n);
      }
    });
  }
  for (std::thread& t : ts) t.join();
  if (failed) return first_error;
  return Summarize(lat, done.load(), NowSeconds() - t0);
}

Status CheckValue(const Op& op, size_t i, std::span<const std::byte> got, const char* path) {
  if (got.size() != op.values[i].size() ||
      std::memcmp(got.data(), op.values[i].data(), got.size()) != 0) {
    return DataLossError(std::string(path) + " " + op.name + " of " + op.keys[i].ToHex() +
                         ": the bytes differ from those stored");
  }
  return Status();
}

// Keeps `depth` commands in flight from min(depth, max_threads) threads, each on a queue pair
// of its own: a thread polls its commands, checks each completion, and resubmits every slot that
// completed in one pass as one batch (one doorbell).
Result<Sample> RunNvme(nvmekv::Host& host, const Op& op, int depth, int max_threads, double seconds,
                       std::vector<std::vector<nvmekv::DataBuffer>>& buffers) {
  const int threads = std::min(depth, max_threads);
  const size_t per_thread = static_cast<size_t>(std::max(1, depth / threads));
  std::vector<uint64_t> before_doorbells, before_commands;
  for (size_t q = 0; q < host.io_queue_count(); ++q) {
    before_doorbells.push_back(host.io_queue(q).doorbell_writes());
    before_commands.push_back(host.io_queue(q).commands());
  }
  std::atomic<uint64_t> done{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  std::vector<Status> errors(static_cast<size_t>(threads));
  const double t0 = NowSeconds(), end = t0 + seconds;
  auto body = [&](int t) -> Status {
    nvmekv::QueuePair& q = host.io_queue(static_cast<size_t>(t) % host.io_queue_count());
    std::vector<nvmekv::DataBuffer>& bufs = buffers[static_cast<size_t>(t)];
    std::vector<size_t> which(per_thread);
    std::vector<uint16_t> ids(per_thread);
    std::vector<double> started(per_thread);
    std::vector<bool> in_flight(per_thread, false);
    uint64_t next = 0;
    auto command = [&](size_t slot) {
      which[slot] = (next++ * 7 + static_cast<size_t>(t)) % op.keys.size();
      return op.size == 0 ? nvmekv::ExistCommand(op.keys[which[slot]])
                          : nvmekv::RetrieveCommand(op.keys[which[slot]], bufs[slot].offset(),
                                                    static_cast<uint32_t>(op.size));
    };
    std::vector<size_t> ready(per_thread);
    for (size_t i = 0; i < per_thread; ++i) ready[i] = i;
    std::vector<nvmekv::SubmissionEntry> batch;
    std::vector<uint16_t> batch_ids;
    Status failed;
    uint64_t empty_passes = 0;
    prctl(PR_SET_TIMERSLACK, 1000UL);  // microsecond sleeps, not the default 50 us slack
    while (true) {
      // Resubmit every free slot as one batch, unless time is up.
      if (!ready.empty() && NowSeconds() < end) {
        batch.clear();
        for (size_t slot : ready) batch.push_back(command(slot));
        batch_ids.resize(batch.size());
        OC_RETURN_IF_ERROR(q.Submit(batch, batch_ids));
        const double now = NowSeconds();
        for (size_t i = 0; i < ready.size(); ++i) {
          ids[ready[i]] = batch_ids[i];
          started[ready[i]] = now;
          in_flight[ready[i]] = true;
        }
        ready.clear();
      }
      bool any = false;
      for (size_t slot = 0; slot < per_thread; ++slot) {
        if (!in_flight[slot]) continue;
        any = true;
        std::optional<nvmekv::CompletionEntry> c = q.Poll(ids[slot]);
        if (!c) continue;
        in_flight[slot] = false;
        lat[static_cast<size_t>(t)].push_back((NowSeconds() - started[slot]) * 1e6);
        Status s = nvmekv::CompletionStatusToStatus(*c, "NVMe-KV " + op.name);
        if (s.ok() && op.size > 0) {
          s = CheckValue(op, which[slot],
                         bufs[slot].bytes().first(std::min<size_t>(c->dw[0], op.size)), "NVMe-KV");
        }
        if (!s.ok() && failed.ok()) failed = s;
        done++;
        ready.push_back(slot);
      }
      if (!any) break;  // time is up and nothing is in flight
      // Nothing came: spin a little, then back off in sleeps (2 to 32 us), so that polling
      // does not take the cores the store needs (a Ceph OSD on this machine).
      if (!ready.empty()) {
        empty_passes = 0;
      } else if (++empty_passes > 32) {
        std::this_thread::sleep_for(std::chrono::microseconds(
            std::min<uint64_t>(32, uint64_t{2} << std::min<uint64_t>(4, (empty_passes - 32) / 8))));
      } else {
        std::this_thread::yield();
      }
      if (!failed.ok()) ready.clear();  // let the rest finish, submit nothing more
      if (NowSeconds() > end + 30)
        return Status(StatusCode::kDeadlineExceeded, "NVMe-KV commands did not finish");
    }
    return failed;
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] { errors[static_cast<size_t>(t)] = body(t); });
  }
  for (std::thread& th : ts) th.join();
  for (const Status& e : errors) OC_RETURN_IF_ERROR(e);
  Sample s = Summarize(lat, done.load(), NowSeconds() - t0);
  uint64_t doorbells = 0, commands = 0;
  for (size_t q = 0; q < host.io_queue_count(); ++q) {
    doorbells += host.io_queue(q).doorbell_writes() - before_doorbells[q];
    commands += host.io_queue(q).commands() - before_commands[q];
  }
  s.doorbells_per_command =
      commands ? static_cast<double>(doorbells) / static_cast<double>(commands) : 0;
  return s;
}

Result<Sample> RunS3(const s3::S3Endpoint& endpoint, const Op& op, int depth, double seconds,
                     std::vector<std::unique_ptr<s3::S3Connection>>& conns) {
  while (conns.size() < static_cast<size_t>(depth)) {
    conns.push_back(std::make_unique<s3::S3Connection>(endpoint, s3::S3Credentials{}));
  }
  std::vector<uint64_t> next(static_cast<size_t>(depth), 0);
  std::vector<std::string> got(static_cast<size_t>(depth));
  auto body = [&](int t, std::vector<double>* lat) -> Result<int> {
    size_t i = (next[static_cast<size_t>(t)]++ * 7 + static_cast<size_t>(t)) % op.keys.size();
    std::string& g = got[static_cast<size_t>(t)];
    g.clear();
    const double t0 = NowSeconds();
    OC_ASSIGN_OR_RETURN(
        s3::S3Response r,
        conns[static_cast<size_t>(t)]->Send(
            op.size == 0 ? "HEAD" : "GET", std::string("/") + kBucket + "/" + op.keys[i].ToHex(),
            {}, "", [&](std::span<const std::byte> piece) {
              g.append(reinterpret_cast<const char*>(piece.data()), piece.size());
              return Status();
            }));
    lat->push_back((NowSeconds() - t0) * 1e6);
    if (r.status != 200)
      return InternalError("S3 " + op.name + ": HTTP " + std::to_string(r.status));
    if (op.size > 0) OC_RETURN_IF_ERROR(CheckValue(op, i, AsBytes(g), "S3"));
    return 1;
  };
  return Drive(depth, seconds, body);
}

Result<Sample> RunDirect(Store& store, const Op& op, int depth, double seconds,
                         std::vector<std::string>& scratch) {
  scratch.resize(std::max<size_t>(scratch.size(), static_cast<size_t>(depth)));
  std::vector<uint64_t> next(static_cast<size_t>(depth), 0);
  auto body = [&](int t, std::vector<double>* lat) -> Result<int> {
    size_t i = (next[static_cast<size_t>(t)]++ * 7 + static_cast<size_t>(t)) % op.keys.size();
    std::string name = std::string(kBucket) + "/" + op.keys[i].ToHex();
    const double t0 = NowSeconds();
    if (op.size == 0) {
      const std::string_view view = name;
      OC_ASSIGN_OR_RETURN(std::vector<bool> e, store.Exist(std::span(&view, 1)));
      lat->push_back((NowSeconds() - t0) * 1e6);
      if (!e[0]) return NotFoundError("direct exist of " + name);
      return 1;
    }
    std::string& buf = scratch[static_cast<size_t>(t)];
    buf.resize(op.size);
    OC_ASSIGN_OR_RETURN(size_t n, store.Retrieve(name, AsWritableBytes(buf)));
    lat->push_back((NowSeconds() - t0) * 1e6);
    OC_RETURN_IF_ERROR(CheckValue(op, i, AsBytes(std::string_view(buf).substr(0, n)), "direct"));
    return 1;
  };
  return Drive(depth, seconds, body);
}

// `uri` for one role ("gateway", "controller", "direct"); "" when the role shares the gateway's.
using StoreUriFor = std::function<std::string(const std::string& role)>;

Status RunBackend(const NvmeKvBenchFlags& f, const std::string& backend, const StoreUriFor& uri_for,
                  const fs::path& root, Report* report) {
  const std::string uri = uri_for("gateway");
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  uint64_t largest = 0;
  std::vector<Op> ops;
  for (const std::string& s : f.sizes) {
    OC_ASSIGN_OR_RETURN(uint64_t size, ParseByteSize(s));
    if (size == 0 || size > (64u << 20)) return InvalidArgumentError("--sizes: 1 byte to 64MiB");
    largest = std::max(largest, size);
    Op op;
    op.name = "retrieve_" + (size % (1 << 20) == 0 ? std::to_string(size >> 20) + "m"
                                                   : std::to_string(size >> 10) + "k");
    op.size = size;
    ops.push_back(std::move(op));
  }
  ops.push_back(Op{.name = "exist"});
  // The gateway: the objects go in through it.
  OC_ASSIGN_OR_RETURN(ServerChild gw,
                      StartServer(root / (backend + "-gateway"), /*fresh=*/true, {"--store", uri}));
  OC_ASSIGN_OR_RETURN(s3::S3Endpoint endpoint, s3::S3Endpoint::Parse(gw.endpoint));
  {
    s3::S3Connection conn(endpoint, {});
    OC_ASSIGN_OR_RETURN(s3::S3Response r, conn.Send("PUT", std::string("/") + kBucket, {}, "",
                                                    [](auto) { return Status(); }));
    if (r.status != 200 && r.status != 409) {
      return InternalError("creating bucket " + std::string(kBucket) + ": HTTP " +
                           std::to_string(r.status));
    }
    uint32_t seed = 1;
    for (Op& op : ops) {
      for (int i = 0; i < f.objects; ++i) {
        std::string id = backend + "-" + op.name + "-" + std::to_string(i);
        std::array<uint8_t, 16> k{};
        for (size_t b = 0; b < 16; ++b)
          k[b] = static_cast<uint8_t>(std::hash<std::string>{}(id + char('a' + b)));
        op.keys.push_back(*Key::FromBytes(k));
        std::string value(op.size == 0 ? 1 : op.size, '\0');
        for (char& c : value) c = static_cast<char>((seed = seed * 1103515245 + 12345) >> 16);
        OC_ASSIGN_OR_RETURN(
            r, conn.Send("PUT", std::string("/") + kBucket + "/" + op.keys.back().ToHex(), {},
                         value, [](auto) { return Status(); }));
        if (r.status != 200)
          return InternalError("PUT of a bench object: HTTP " + std::to_string(r.status));
        op.values.push_back(std::move(value));
      }
    }
  }
  // The same values where the controller and the direct calls read them.
  for (const char* role : {"controller", "direct"}) {
    if (uri_for(role).empty()) continue;
    OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> s, OpenStore(uri_for(role)));
    for (const Op& op : ops) {
      for (size_t i = 0; i < op.keys.size(); ++i) {
        OC_RETURN_IF_ERROR(
            s->Put(std::string(kBucket) + "/" + op.keys[i].ToHex(), AsBytes(op.values[i])));
      }
    }
  }
  auto role_uri = [&](const char* role) { return uri_for(role).empty() ? uri : uri_for(role); };
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(role_uri("direct")));
  // The controller.
  int max_depth = *std::max_element(f.depths.begin(), f.depths.end());
  uint64_t data_bytes = largest * static_cast<uint64_t>(max_depth) + (64u << 20);
  const std::string shm = "objectcache-bench-" + std::to_string(getpid()) + "-" + backend;
  ChildProcess controller({self,
                           "nvme-kv",
                           "serve",
                           "--store",
                           role_uri("controller"),
                           "--shm",
                           shm,
                           "--prefix",
                           std::string(kBucket) + "/",
                           "--queues",
                           "8",
                           "--queue-entries",
                           "1024",
                           "--data-size",
                           std::to_string(data_bytes),
                           "--max-value",
                           std::to_string(largest),
                           "--workers",
                           std::to_string(f.controller_workers),
                           "--busy-poll-us",
                           std::to_string(f.controller_busy_poll_us)},
                          (root / (backend + "-nvme-kv.log")).string());
  Result<std::unique_ptr<nvmekv::Host>> host = UnavailableError("not started");
  for (int i = 0; i < 200 && controller.Running(); ++i) {
    host = nvmekv::Host::Attach({.shm_name = shm, .io_queues = 8, .queue_entries = 1024});
    if (host.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!host.ok()) return host.status().Annotate("attaching to objectcache nvme-kv serve");
  std::vector<std::vector<nvmekv::DataBuffer>> buffers(static_cast<size_t>(f.nvme_threads));
  const int per_thread = std::max(1, max_depth / f.nvme_threads);
  for (auto& tb : buffers) {
    for (int b = 0; b < per_thread; ++b) {
      OC_ASSIGN_OR_RETURN(nvmekv::DataBuffer buf, (*host)->Allocate(largest));
      tb.push_back(std::move(buf));
    }
  }
  std::vector<std::unique_ptr<s3::S3Connection>> conns;
  std::vector<std::string> scratch;

  // samples[op][depth][path] over rounds
  std::map<std::string, std::vector<Sample>> samples;
  for (int round = 0; round < f.rounds; ++round) {
    for (const Op& op : ops) {
      for (int depth : f.depths) {
        std::string base = backend + "_" + op.name + "_qd" + std::to_string(depth);
        OC_ASSIGN_OR_RETURN(Sample n,
                            RunNvme(**host, op, depth, f.nvme_threads, f.seconds, buffers));
        OC_ASSIGN_OR_RETURN(Sample s, RunS3(endpoint, op, depth, f.seconds, conns));
        OC_ASSIGN_OR_RETURN(Sample d, RunDirect(*store, op, depth, f.seconds, scratch));
        samples[base + "_nvme"].push_back(n);
        samples[base + "_s3"].push_back(s);
        samples[base + "_direct"].push_back(d);
      }
    }
  }
  auto median = [&](const std::string& key, double Sample::*field) {
    std::vector<double> v;
    for (const Sample& s : samples[key]) v.push_back(s.*field);
    return Median(v);
  };
  for (const Op& op : ops) {
    for (int depth : f.depths) {
      std::string base = backend + "_" + op.name + "_qd" + std::to_string(depth);
      for (const char* path : {"nvme", "s3", "direct"}) {
        std::string key = base + "_" + path;
        report->Metric(key + "_ops_per_s", median(key, &Sample::ops_per_s), "ops/s");
        report->Metric(key + "_p50_us", median(key, &Sample::p50_us), "us");
        report->Metric(key + "_p99_us", median(key, &Sample::p99_us), "us");
      }
      report->Metric(base + "_doorbells_per_command",
                     median(base + "_nvme", &Sample::doorbells_per_command), "",
                     "SQ tail doorbell writes per NVMe command");
      double s3_rate = median(base + "_s3", &Sample::ops_per_s);
      if (s3_rate > 0) {
        report->Metric(base + "_nvme_vs_s3", median(base + "_nvme", &Sample::ops_per_s) / s3_rate,
                       "x", "NVMe-KV rate / S3 rate (medians)");
      }
      report->Metric(
          base + "_p50_nvme_minus_direct_us",
          median(base + "_nvme", &Sample::p50_us) - median(base + "_direct", &Sample::p50_us), "us",
          "added latency of the controller over a direct store call");
    }
  }
  buffers.clear();
  host->reset();
  return Status();
}

Status RunNvmeKvBench(const NvmeKvBenchFlags& f) {
  if (f.rounds < 1 || f.seconds <= 0 || f.objects < 1 || f.nvme_threads < 1 || f.nvme_threads > 8) {
    return InvalidArgumentError(
        "--rounds, --seconds and --objects must be positive, --nvme-threads 1 to 8");
  }
  for (int d : f.depths) {
    if (d < 1 || d > 1024) return InvalidArgumentError("--depths: 1 to 1024");
  }
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-nvme-kv"));
  Report report("nvme-kv");
  report.Param("objects", f.objects);
  report.Param("nvme_threads", f.nvme_threads);
  report.Param("controller_workers", f.controller_workers);
  report.Param("controller_busy_poll_us", f.controller_busy_poll_us);
  report.Param("seconds", f.seconds);
  report.Param("rounds", f.rounds);
  report.Param("depths", f.depths);
  report.Param("sizes", f.sizes);
  const fs::path root = scratch.path();
  OC_RETURN_IF_ERROR(RunBackend(
      f, "file",
      [&](const std::string& role) { return "file://" + (root / ("store-" + role)).string(); },
      root, &report));
  if (!f.ceph_dir.empty()) {
    std::string uri = "rados://objectcache?conf=" + (fs::path(f.ceph_dir) / "ceph.conf").string() +
                      "&namespace=bench-nvme-kv-" + std::to_string(getpid());
    OC_RETURN_IF_ERROR(RunBackend(
        f, "rados", [&](const std::string& role) { return role == "gateway" ? uri : ""; }, root,
        &report));
  }
  report.Print();
  return report.WriteJson(f.json);
}

}  // namespace

void AddNvmeKvBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<NvmeKvBenchFlags>();
  CLI::App* s = AddBench(
      bench, "nvme-kv",
      "NVMe-KV controller against S3 GET/HEAD on objectcache serve and direct store calls: "
      "64 KiB and 2 MiB Retrieve and Exist at queue depth 1, 16, 256 (file://, rados:// with "
      "--ceph)",
      f, RunNvmeKvBench);
  AddScratchDir(s, &f->dir);
  s->add_option("--ceph", f->ceph_dir,
                "Also over RADOS: the cluster of scripts/ceph-dev start DIR");
  s->add_option("--sizes", f->sizes, "Value sizes");
  s->add_option("--depths", f->depths, "Queue depths");
  s->add_option("--objects", f->objects, "Objects per size");
  s->add_option("--nvme-threads", f->nvme_threads,
                "Host threads submitting NVMe-KV commands (1-8)");
  s->add_option("--controller-workers", f->controller_workers,
                "The controller's --workers: store calls it runs at once");
  s->add_option("--controller-busy-poll-us", f->controller_busy_poll_us,
                "The controller's --busy-poll-us: how long it spins after a command");
  s->add_option("--seconds", f->seconds, "Seconds per measurement");
  s->add_option("--rounds,--repeats", f->rounds, "Interleaved rounds (medians are reported)");
}

}  // namespace objectcache::bench
