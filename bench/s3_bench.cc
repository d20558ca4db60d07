// `objectcache bench s3`: our S3 server against nginx serving the same bytes as static files
// from the same disk, side by side, interleaved. See bench_command.h.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "core/seeded_data.h"
#include "objectcache/store_registry.h"

#include <fcntl.h>
#include <cstring>
#include <nlohmann/json.hpp>

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct S3BenchFlags {
  std::string dir;  // empty: a temporary directory (ScratchRoot)
  std::vector<std::string> sizes = {"64KiB", "2MiB"};
  std::vector<int> connections = {1, 8, 64};
  double seconds = 2;
  int rounds = 2;
  int objects = 64;
  std::string nginx = "/usr/sbin/nginx";
  // Plain GETs of one object driven by wrk against both servers (empty: not run). Our own
  // generator (the rows above) checks every byte but tops out near 10 Gbit/s on these cores,
  // which hides the servers' difference; wrk does not.
  std::string wrk = "/usr/bin/wrk";
  int wrk_connections = 16;
  std::string json;
};

struct WrkResult {
  double requests_per_s = 0;
  uint64_t bad = 0;  // non-2xx responses and socket errors
};

// `wrk -t2 -cN -dS URL`: its request rate and what it counted as failed.
Result<WrkResult> RunWrk(const std::string& wrk, const std::string& url, int connections,
                         double seconds) {
  const std::string cmd = wrk + " -t2 -c" + std::to_string(connections) + " -d" +
                          std::to_string(std::max(1, static_cast<int>(seconds + 0.5))) + "s " +
                          url + " 2>&1";
  FILE* out = ::popen(cmd.c_str(), "r");
  if (!out) return UnavailableError("cannot run " + wrk);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  if (::pclose(out) != 0) return UnavailableError("wrk failed: " + text);
  WrkResult r;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first, second;
    words >> first;
    if (first == "Requests/sec:") words >> r.requests_per_s;
    if (first == "Non-2xx") {
      for (std::string w; words >> w;) second = w;  // "Non-2xx or 3xx responses: N"
      r.bad += std::stoull(second);
    }
    if (first == "Socket") {  // "Socket errors: connect A, read B, write C, timeout D"
      for (std::string w; words >> w;) {
        if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0]))) r.bad += std::stoull(w);
      }
    }
  }
  if (r.requests_per_s <= 0) return UnavailableError("wrk reported no rate: " + text);
  return r;
}

uint64_t PeakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmHWM:")) return std::stoull(line.substr(6));
  }
  return 0;
}

struct RunResult {
  double gbps = 0;
  double p50_ms = 0, p99_ms = 0;
  uint64_t requests = 0, errors = 0;
};

// `connections` threads, each one keep-alive connection, for `seconds`.
RunResult Load(uint16_t port, const std::string& bucket, bool put,
               const std::vector<std::string>& bodies, int connections, double seconds) {
  std::atomic<uint64_t> bytes{0}, errors{0};
  std::vector<std::vector<double>> latencies(connections);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < connections; ++t) {
    threads.emplace_back([&, t] {
      asio::io_context ioc;
      beast::tcp_stream stream(ioc);
      beast::error_code ec;
      stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
      if (ec) {
        errors++;
        return;
      }
      beast::flat_buffer buffer;
      std::mt19937 rng(t);
      for (uint64_t i = 0; std::chrono::steady_clock::now() < end; ++i) {
        const size_t obj = rng() % bodies.size();
        const std::string target = "/" + bucket + "/obj-" + std::to_string(put ? 1000 + t : obj);
        http::request<http::string_body> req{put ? http::verb::put : http::verb::get, target, 11};
        req.set(http::field::host, "127.0.0.1");
        req.keep_alive(true);
        if (put) {
          req.body() = bodies[obj];
          req.prepare_payload();
        }
        const double t0 = NowSeconds();
        http::write(stream, req, ec);
        http::response_parser<http::string_body> parser;
        parser.body_limit(1ull << 30);
        if (!ec) http::read(stream, buffer, parser, ec);
        const double dt = NowSeconds() - t0;
        const auto& res = parser.get();
        if (ec || (res.result_int() != 200 && res.result_int() != 201 && res.result_int() != 204)) {
          errors++;
          if (ec) return;
          continue;
        }
        // Check what came back: a wrong fast answer must not count.
        if (!put && res.body() != bodies[obj]) {
          errors++;
          continue;
        }
        bytes += bodies[obj].size();
        latencies[t].push_back(dt);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::vector<double> all;
  for (auto& v : latencies) all.insert(all.end(), v.begin(), v.end());
  RunResult r;
  r.requests = all.size();
  r.errors = errors;
  r.gbps = bytes.load() * 8 / seconds / 1e9;
  r.p50_ms = Percentile(all, 0.5) * 1e3;
  r.p99_ms = Percentile(all, 0.99) * 1e3;
  return r;
}

Status RunS3Bench(const S3BenchFlags& f) {
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-s3"));
  const fs::path& root = scratch.path();
  OC_ASSIGN_OR_RETURN(const fs::path nginx_dir, scratch.FreshSubdir("nginx"));
  std::error_code ec;
  fs::create_directories(nginx_dir / "www" / "bench", ec);
  fs::create_directories(nginx_dir / "tmp", ec);
  fs::create_directories(nginx_dir / "logs", ec);
  if (ec) return ErrnoError("creating " + nginx_dir.string(), ec.value());

  OC_ASSIGN_OR_RETURN(ServerChild ours_server, StartServer(root, /*fresh=*/true));
  ChildProcess& ours = *ours_server.process;
  const uint16_t ours_port = ours_server.port;
  const uint16_t nginx_port = FreePort();
  {
    std::ofstream conf(nginx_dir / "nginx.conf");
    // As root, nginx's workers would drop to www-data and could not write our directories.
    if (::geteuid() == 0) conf << "user root;\n";
    conf << "daemon off;\nworker_processes 2;\npid " << (nginx_dir / "nginx.pid").string()
         << ";\nerror_log " << (nginx_dir / "logs" / "error.log").string() << ";\n"
         << "events { worker_connections 1024; }\n"
         << "http {\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests "
            "1000000;\n"
         << "  client_body_temp_path " << (nginx_dir / "tmp").string() << ";\n"
         << "  server {\n    listen 127.0.0.1:" << nginx_port << ";\n    root "
         << (nginx_dir / "www").string() << ";\n"
         << "    location / { dav_methods PUT; client_max_body_size 0; create_full_put_path on; }\n"
         << "  }\n}\n";
  }
  ChildProcess nginx(
      {f.nginx, "-p", (nginx_dir).string(), "-c", (nginx_dir / "nginx.conf").string()},
      (root / "nginx.log").string());
  if (!WaitForPort(nginx_port)) return UnavailableError("nginx did not start (see nginx.log)");

  Report report("s3");
  report.Param("seconds_per_run", f.seconds);
  report.Param("rounds", f.rounds);
  report.Param("objects", f.objects);
  report.Param("ours", "objectcache serve --anonymous, local store, 2 I/O workers");
  report.Param("baseline", "nginx 2 workers, static files + dav PUT, same disk");
  report.Param("machine", std::to_string(std::thread::hardware_concurrency()) +
                              " cores, client on the same host");
  std::printf("\n%-6s %-5s %4s  %-8s %10s %10s %10s %8s\n", "op", "size", "conn", "server",
              "Gbit/s", "p50 ms", "p99 ms", "errors");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  uint64_t total_errors = 0;
  for (const std::string& size_text : f.sizes) {
    OC_ASSIGN_OR_RETURN(uint64_t size, ParseByteSize(size_text));
    std::vector<std::string> bodies;
    std::mt19937_64 rng(size);
    for (int i = 0; i < f.objects; ++i) bodies.push_back(RandomBytes(rng, size));
    // The same bytes in both: PUT through each server once.
    const std::string bucket = "bench";
    {
      asio::io_context ioc;
      beast::tcp_stream s(ioc);
      s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), ours_port));
      http::request<http::empty_body> req{http::verb::put, "/" + bucket, 11};
      req.set(http::field::host, "127.0.0.1");
      req.prepare_payload();
      http::write(s, req);
      beast::flat_buffer buf;
      http::response<http::string_body> res;
      http::read(s, buf, res);
    }
    for (uint16_t port : {ours_port, nginx_port}) {
      RunResult warm = Load(port, bucket, true, bodies, 1, 0.01);
      (void)warm;
    }
    for (int i = 0; i < f.objects; ++i) {
      for (uint16_t port : {ours_port, nginx_port}) {
        asio::io_context ioc;
        beast::tcp_stream s(ioc);
        s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        http::request<http::string_body> req{http::verb::put,
                                             "/" + bucket + "/obj-" + std::to_string(i), 11};
        req.set(http::field::host, "127.0.0.1");
        req.body() = bodies[i];
        req.prepare_payload();
        http::write(s, req);
        beast::flat_buffer buf;
        http::response<http::string_body> res;
        http::read(s, buf, res);
        if (res.result_int() >= 300)
          return InternalError("preloading object failed: " + res.body());
      }
    }
    // wrk: plain GETs of obj-0 (checked once here, byte for byte), interleaved.
    if (!f.wrk.empty()) {
      RunResult check = Load(ours_port, bucket, false, {bodies[0]}, 1, 0.05);
      total_errors += check.errors;
      std::vector<double> rps[2];
      for (int round = 0; round < f.rounds; ++round) {
        for (int k = 0; k < 2; ++k) {
          const int side = (round % 2 == 0) ? k : 1 - k;
          const uint16_t port = side == 0 ? ours_port : nginx_port;
          OC_ASSIGN_OR_RETURN(
              WrkResult w,
              RunWrk(f.wrk, "http://127.0.0.1:" + std::to_string(port) + "/" + bucket + "/obj-0",
                     f.wrk_connections, f.seconds));
          total_errors += w.bad;
          rps[side].push_back(w.requests_per_s);
        }
      }
      const double ours_rps = Median(rps[0]), nginx_rps = Median(rps[1]);
      const double ratio = nginx_rps > 0 ? ours_rps / nginx_rps : 0;
      for (int side = 0; side < 2; ++side) {
        std::printf("%-6s %-5s %4d  %-8s %10.3f %21s (wrk, %.0f req/s)\n", "GET", size_text.c_str(),
                    f.wrk_connections, side == 0 ? "ours" : "nginx",
                    Median(rps[side]) * static_cast<double>(size) * 8 / 1e9, "", Median(rps[side]));
      }
      std::printf("%-6s %-5s %4d  %-8s %10.3f\n", "GET", size_text.c_str(), f.wrk_connections,
                  "ratio", ratio);
      rows.push_back({{"op", "GET"},
                      {"driver", "wrk"},
                      {"size", size_text},
                      {"connections", f.wrk_connections},
                      {"requests_per_s", ours_rps},
                      {"nginx_requests_per_s", nginx_rps},
                      {"ratio_vs_nginx", ratio}});
      report.Metric(
          "get_wrk_ratio_vs_nginx_" + size_text, ratio, "x",
          "wrk -t2 -c" + std::to_string(f.wrk_connections) + ", one object; target >= 0.9");
    }
    for (bool put : {false, true}) {
      for (int conns : f.connections) {
        std::vector<double> g[2], p50[2], p99[2];
        for (int round = 0; round < f.rounds; ++round) {
          for (int k = 0; k < 2; ++k) {
            const int side = (round % 2 == 0) ? k : 1 - k;  // alternate who goes first
            RunResult r =
                Load(side == 0 ? ours_port : nginx_port, bucket, put, bodies, conns, f.seconds);
            total_errors += r.errors;
            g[side].push_back(r.gbps);
            p50[side].push_back(r.p50_ms);
            p99[side].push_back(r.p99_ms);
          }
        }
        const char* op = put ? "PUT" : "GET";
        for (int side = 0; side < 2; ++side) {
          std::printf("%-6s %-5s %4d  %-8s %10.3f %10.3f %10.3f %8s\n", op, size_text.c_str(),
                      conns, side == 0 ? "ours" : "nginx", Median(g[side]), Median(p50[side]),
                      Median(p99[side]), "");
        }
        const double ratio = Median(g[1]) > 0 ? Median(g[0]) / Median(g[1]) : 0;
        std::printf("%-6s %-5s %4d  %-8s %10.3f\n", op, size_text.c_str(), conns, "ratio", ratio);
        rows.push_back({{"op", op},
                        {"size", size_text},
                        {"connections", conns},
                        {put ? "put_gbps" : "get_gbps", Median(g[0])},
                        {"p50_ms", Median(p50[0])},
                        {"p99_ms", Median(p99[0])},
                        {"nginx_gbps", Median(g[1])},
                        {"nginx_p50_ms", Median(p50[1])},
                        {"nginx_p99_ms", Median(p99[1])},
                        {"ratio_vs_nginx", ratio}});
        report.Metric(std::string(put ? "put" : "get") + "_ratio_vs_nginx_" + size_text + "_c" +
                          std::to_string(conns),
                      ratio, "x");
      }
    }
  }
  const uint64_t peak_kib = PeakRssKiB(ours.pid());
  report.Metric("server_peak_rss_mib", peak_kib / 1024.0, "MiB", "VmHWM over the whole run");
  report.Metric("errors", static_cast<double>(total_errors), "", "failed or wrong responses");
  report.Print();
  ours.Stop();
  nginx.Stop();
  nlohmann::ordered_json j = report.ToJson();
  j["benchmark"] = "s3";
  j["rows"] = rows;
  j["server_peak_rss_mib"] = peak_kib / 1024.0;
  j["errors"] = total_errors;
  OC_RETURN_IF_ERROR(WriteJsonFile(f.json, j));
  if (total_errors > 0)
    return DataLossError(std::to_string(total_errors) + " requests failed or returned wrong bytes");
  return Status();
}

}  // namespace

void AddS3BenchCommand(CLI::App* bench) {
  auto f = std::make_shared<S3BenchFlags>();
  CLI::App* s = AddBench(
      bench, "s3",
      "S3 GET/PUT throughput and latency: objectcache serve against nginx, same bytes, same disk",
      f, RunS3Bench);
  AddScratchDir(s, &f->dir);
  s->add_option("--sizes", f->sizes, "Object sizes");
  s->add_option("--connections", f->connections, "Concurrent connections");
  s->add_option("--seconds", f->seconds, "Seconds per run");
  s->add_option("--rounds,--repeats", f->rounds, "Runs per server per cell (interleaved)");
  s->add_option("--objects", f->objects, "Distinct objects");
  s->add_option("--nginx", f->nginx, "nginx binary");
  s->add_option("--wrk", f->wrk, "wrk binary for the plain-GET rows (empty: skip them)");
  s->add_option("--wrk-connections", f->wrk_connections, "Connections wrk keeps open");
}

}  // namespace objectcache::bench
