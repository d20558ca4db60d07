// `objectcache bench tls`: GET throughput of `objectcache serve` over HTTPS against the same
// server over plain HTTP, same objects, same client (the library's S3Connection), interleaved.
// The certificate is a self-signed P-256 one made by the openssl CLI for the run.
#include <sys/resource.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include <openssl/evp.h>

#include "bench/bench_command.h"
#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "core/seeded_data.h"
#include "objectcache/store_registry.h"
#include "s3/s3_connection.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

struct TlsBenchFlags {
  std::string dir;
  std::string size = "2MiB";
  std::vector<int> connections = {1, 4};
  double seconds = 2;
  int rounds = 3;
  int objects = 16;
  std::string openssl = "/usr/bin/openssl";
  std::string json;
};

struct Side {
  std::string name;
  s3::S3Endpoint endpoint;
};

struct Run {
  double gbps = 0;
  double server_cpu_s_per_gib = 0;  // the server process's CPU
  double client_cpu_s_per_gib = 0;  // this process's CPU: only the load's threads run
};

// GETs of random objects on `connections` connections for `seconds`; every body is compared
// with what was stored. Gbit/s of verified bytes and each side's CPU per GiB of them; `errors`
// counts the rest.
Run LoadGets(const s3::S3Endpoint& endpoint, pid_t server, const std::vector<std::string>& bodies,
             int connections, double seconds, std::atomic<uint64_t>* errors) {
  std::atomic<uint64_t> bytes{0};
  const double server_cpu0 = ProcessCpuSeconds(server), client_cpu0 = CpuSeconds(RUSAGE_SELF);
  const double end = NowSeconds() + seconds;
  std::vector<std::thread> threads;
  for (int t = 0; t < connections; ++t) {
    threads.emplace_back([&, t] {
      s3::S3Connection conn(endpoint, {});
      std::mt19937 rng(t);
      std::string got;
      while (NowSeconds() < end) {
        const size_t obj = rng() % bodies.size();
        got.clear();
        Result<s3::S3Response> r =
            conn.Send("GET", "/bench/obj-" + std::to_string(obj), {}, "", [&](auto piece) {
              got.append(reinterpret_cast<const char*>(piece.data()), piece.size());
              return Status();
            });
        if (!r.has_value() || r->status != 200 || got != bodies[obj]) {
          (*errors)++;
          continue;
        }
        bytes += got.size();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const double gib = std::max(1.0, static_cast<double>(bytes.load())) / kGiB;
  return {.gbps = static_cast<double>(bytes.load()) * 8 / seconds / 1e9,
          .server_cpu_s_per_gib = (ProcessCpuSeconds(server) - server_cpu0) / gib,
          .client_cpu_s_per_gib = (CpuSeconds(RUSAGE_SELF) - client_cpu0) / gib};
}

// One core's AES-128-GCM encryption rate in Gbit/s, in 16 KiB records with their tags, as TLS
// 1.3 uses it (OpenSSL's EVP, what the TLS stack calls).
double AesGcmGbps(double seconds) {
  EVP_CIPHER_CTX* ctx = ::EVP_CIPHER_CTX_new();
  const unsigned char key[16] = {1}, iv[12] = {2};
  std::vector<unsigned char> in(16 << 10, 7), out(in.size() + 16);
  unsigned char tag[16];
  uint64_t bytes = 0;
  const double start = NowSeconds();
  double now = start;
  while (now - start < seconds) {
    for (int i = 0; i < 64; ++i) {
      int n = 0;
      ::EVP_EncryptInit_ex(ctx, ::EVP_aes_128_gcm(), nullptr, key, iv);
      ::EVP_EncryptUpdate(ctx, out.data(), &n, in.data(), static_cast<int>(in.size()));
      ::EVP_EncryptFinal_ex(ctx, out.data() + n, &n);
      ::EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, sizeof(tag), tag);
      bytes += in.size();
    }
    now = NowSeconds();
  }
  ::EVP_CIPHER_CTX_free(ctx);
  return static_cast<double>(bytes) * 8 / (now - start) / 1e9;
}

Status Put(const s3::S3Endpoint& endpoint, const std::string& path, const std::string& body) {
  s3::S3Connection conn(endpoint, {});
  OC_ASSIGN_OR_RETURN(s3::S3Response r,
                      conn.Send("PUT", path, {}, body, [](auto) { return Status(); }));
  if (r.status != 200) return InternalError("PUT " + path + ": " + std::to_string(r.status));
  return Status();
}

Status RunTlsBench(const TlsBenchFlags& f) {
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::Make(f.dir, "objectcache-bench-tls"));
  const fs::path root = scratch.path();
  const std::string cert = (root / "cert.pem").string(), key = (root / "key.pem").string();
  {
    ChildProcess openssl(
        {f.openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1"},
        (root / "openssl.log").string());
    for (int i = 0; i < 600 && openssl.Running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (!fs::exists(cert) || !fs::exists(key)) {
    return UnavailableError("openssl made no certificate (see " + (root / "openssl.log").string() +
                            ")");
  }
  std::vector<Side> sides(2);
  std::vector<std::unique_ptr<ChildProcess>> servers;
  for (int s = 0; s < 2; ++s) {
    const bool tls = s == 1;
    std::vector<std::string> extra;
    if (tls) extra = {"--tls-cert", cert, "--tls-key", key};
    OC_ASSIGN_OR_RETURN(ServerChild server,
                        StartServer(root / (tls ? "https" : "http"), /*fresh=*/true, extra));
    servers.push_back(std::move(server.process));
    sides[s] = {tls ? "https" : "http",
                {.host = "127.0.0.1", .port = server.port, .tls = tls, .ca_file = cert}};
  }
  OC_ASSIGN_OR_RETURN(uint64_t size, ParseByteSize(f.size));
  std::vector<std::string> bodies;
  std::mt19937_64 rng(size);
  for (int i = 0; i < f.objects; ++i) bodies.push_back(RandomBytes(rng, size));
  for (const Side& side : sides) {
    OC_RETURN_IF_ERROR(Put(side.endpoint, "/bench", ""));
    for (int i = 0; i < f.objects; ++i) {
      OC_RETURN_IF_ERROR(Put(side.endpoint, "/bench/obj-" + std::to_string(i), bodies[i]));
    }
  }

  Report report("tls");
  report.Param("object_size", f.size);
  report.Param("seconds_per_run", f.seconds);
  report.Param("rounds", f.rounds);
  report.Param("server",
               "objectcache serve --anonymous, local store, 2 I/O workers; the same "
               "with --tls-cert (ECDSA P-256, TLS 1.3)");
  report.Param("client",
               "S3Connection (the client library's), one keep-alive connection per "
               "thread, every body compared");
  const double aes_gbps = AesGcmGbps(0.5);
  std::printf("\n%-5s %4s %12s %12s %8s %22s %22s\n", "size", "conn", "http Gbit/s", "https Gbit/s",
              "ratio", "server CPU s/GiB h|s", "client CPU s/GiB h|s");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::atomic<uint64_t> errors{0};
  double ratio = 0, ceiling = 0;
  Run last[2];
  for (int conns : f.connections) {
    std::vector<Run> runs[2];
    for (int round = 0; round < f.rounds; ++round) {
      for (int k = 0; k < 2; ++k) {
        const int s = round % 2 == 0 ? k : 1 - k;  // alternate who goes first
        runs[s].push_back(
            LoadGets(sides[s].endpoint, servers[s]->pid(), bodies, conns, f.seconds, &errors));
      }
    }
    for (int s = 0; s < 2; ++s) {
      auto median = [&](double Run::*field) {
        std::vector<double> v;
        for (const Run& r : runs[s]) v.push_back(r.*field);
        return Median(v);
      };
      last[s] = {median(&Run::gbps), median(&Run::server_cpu_s_per_gib),
                 median(&Run::client_cpu_s_per_gib)};
    }
    ratio = last[0].gbps > 0 ? last[1].gbps / last[0].gbps : 0;
    // Were HTTPS to cost only HTTP's CPU plus one encryption and one decryption of each byte
    // at this machine's AES-GCM rate, with the CPU as busy as in the HTTP run.
    const double http_cpu = last[0].server_cpu_s_per_gib + last[0].client_cpu_s_per_gib;
    const double aes_s_per_gib = kGiB * 8 / 1e9 / aes_gbps;
    ceiling = http_cpu / (http_cpu + 2 * aes_s_per_gib);
    std::printf("%-5s %4d %12.3f %12.3f %8.3f %10.2f |%10.2f %10.2f |%10.2f\n", f.size.c_str(),
                conns, last[0].gbps, last[1].gbps, ratio, last[0].server_cpu_s_per_gib,
                last[1].server_cpu_s_per_gib, last[0].client_cpu_s_per_gib,
                last[1].client_cpu_s_per_gib);
    rows.push_back({{"size", f.size},
                    {"connections", conns},
                    {"http_gbps", last[0].gbps},
                    {"https_gbps", last[1].gbps},
                    {"tls_ratio", ratio},
                    {"tls_ratio_ceiling", ceiling},
                    {"http_server_cpu_s_per_gib", last[0].server_cpu_s_per_gib},
                    {"https_server_cpu_s_per_gib", last[1].server_cpu_s_per_gib},
                    {"http_client_cpu_s_per_gib", last[0].client_cpu_s_per_gib},
                    {"https_client_cpu_s_per_gib", last[1].client_cpu_s_per_gib}});
  }
  for (auto& server : servers) server->Stop();
  const std::string at = " at " + std::to_string(f.connections.back()) + " connections";
  report.Metric("tls_ratio", ratio, "x",
                "HTTPS / HTTP GET throughput" + at + " (median of rounds)");
  report.Metric("tls_ratio_ceiling", ceiling, "x",
                "the ratio were HTTPS to add only AES-GCM's encryption and decryption to "
                "HTTP's CPU per byte" +
                    at);
  report.Metric("aes_gcm_gbps", aes_gbps, "Gbit/s", "one core's AES-128-GCM, 16 KiB records");
  report.Metric("https_server_cpu_s_per_gib", last[1].server_cpu_s_per_gib, "s/GiB",
                "HTTP: " + std::to_string(last[0].server_cpu_s_per_gib).substr(0, 5) + at);
  report.Metric("https_client_cpu_s_per_gib", last[1].client_cpu_s_per_gib, "s/GiB",
                "HTTP: " + std::to_string(last[0].client_cpu_s_per_gib).substr(0, 5) + at);
  report.Metric("errors", static_cast<double>(errors.load()), "", "failed or wrong responses");
  report.Print();
  OC_RETURN_IF_ERROR(report.WriteJson(f.json, std::move(rows)));
  if (errors > 0)
    return DataLossError(std::to_string(errors.load()) + " GETs failed or were wrong");
  return Status();
}

}  // namespace

void AddTlsBenchCommand(CLI::App* bench) {
  auto f = std::make_shared<TlsBenchFlags>();
  CLI::App* t = AddBench(bench, "tls",
                         "GET throughput over HTTPS beside plain HTTP, same server, same objects",
                         f, RunTlsBench);
  AddScratchDir(t, &f->dir);
  t->add_option("--size", f->size, "Object size");
  t->add_option("--connections", f->connections, "Concurrent connections (tls_ratio: the last)");
  t->add_option("--seconds", f->seconds, "Seconds per run");
  t->add_option("--rounds,--repeats", f->rounds, "Runs per side per cell (interleaved)");
  t->add_option("--objects", f->objects, "Distinct objects");
  t->add_option("--openssl", f->openssl, "openssl binary");
}

}  // namespace objectcache::bench
