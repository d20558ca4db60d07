// `objectcache serve --anonymous` as a child process of a test, on a fresh store on
// 127.0.0.1 port 0; ended by its PID. And reading a server's /metrics.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "s3/s3_connection.h"

namespace objectcache::testing {

class ServerProcess {
 public:
  // Starts the server with its store in `dir` (which it creates) on `port` (0: any free one),
  // with `extra` arguments after the others (e.g. {"--bandwidth-cap", "1GB"}, or a --store of
  // its own); port() is 0 on failure. The binary is the build's, or $OBJECTCACHE_TEST_BINARY
  // (test binaries carried to another machine, scripts/gpu-check).
  explicit ServerProcess(const std::string& dir, int port = 0,
                         const std::vector<std::string>& extra = {})
      : store_(dir + "/store") {
    std::filesystem::create_directories(dir);
    const std::string port_file = dir + "/port";
    std::filesystem::remove(port_file);
    const std::string listen = "127.0.0.1:" + std::to_string(port);
    const char* binary = std::getenv("OBJECTCACHE_TEST_BINARY");
    if (binary == nullptr) binary = OBJECTCACHE_PATH;
    std::vector<const char*> argv = {
        binary,        "serve",           "--anonymous", "--listen", listen.c_str(),
        "--port-file", port_file.c_str(), "--log-level", "error"};
    // A --store among `extra` replaces the local store in `dir`.
    if (std::find(extra.begin(), extra.end(), "--store") == extra.end()) {
      argv.push_back("--store");
      argv.push_back(store_.c_str());
    }
    for (const std::string& e : extra) argv.push_back(e.c_str());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execv(binary, const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !std::filesystem::exists(port_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::ifstream(port_file) >> port_;
  }
  ~ServerProcess() { Stop(SIGTERM); }

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& store_dir() const { return store_; }

  void Stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string store_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// PUT /BUCKET through `conn`: a KV bucket of `layout` (a preset name or a layout's JSON), or
// with an empty `layout` a bucket for any S3 object.
inline Result<s3::S3Response> PutBucket(s3::S3Connection& conn, const std::string& bucket,
                                        const std::string& layout) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (!layout.empty()) headers.emplace_back("x-objectcache-kv-layout", layout);
  return conn.Send(
      "PUT", "/" + bucket, {}, "", [](auto) { return Status(); }, headers);
}

// The value of one sample of the server's /metrics (GET on its S3 port through `conn`): its
// name with any labels, e.g. objectcache_requests_total{op="BatchStore"}. nullopt when the
// request fails or the server has no such sample.
inline std::optional<uint64_t> MetricValue(s3::S3Connection& conn, const std::string& sample) {
  std::string text;
  auto res = conn.Send("GET", "/metrics", {}, "", [&](std::span<const std::byte> b) {
    text.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status();
  });
  if (!res.has_value() || res->status != 200) return std::nullopt;
  const std::string line = "\n" + sample + " ";  // a sample's line, not its # HELP line
  const size_t at = text.find(line);
  if (at == std::string::npos) return std::nullopt;
  return std::stoull(text.substr(at + line.size()));
}

}  // namespace objectcache::testing
