// Timing, medians and the table/JSON report every benchmark prints.
#pragma once

#include <sys/types.h>
#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::bench {

// Runs a benchmark body; a failure is printed like every command's error and exits 1.
void RunBench(const std::function<Status()>& body);

// A child process (a server the benchmark starts), ended by its PID: SIGTERM, then reaped.
class ChildProcess {
 public:
  // Starts argv[0] with argv, its output to `log`.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log);
  ~ChildProcess() { Stop(); }
  pid_t pid() const { return pid_; }
  // Whether it has not exited yet (reaps it if it has).
  bool Running();
  // Waits for it to exit by itself: its exit code, or -1 when it did not start or was killed.
  int Wait();
  void Stop();

 private:
  pid_t pid_ = -1;
};

inline constexpr double kGiB = 1024.0 * 1024 * 1024;

// CPU seconds (user + system) process `pid` has used so far, from /proc.
double ProcessCpuSeconds(pid_t pid);
// CPU seconds (user + system) used so far by this process (RUSAGE_SELF) or the calling thread
// (RUSAGE_THREAD).
double CpuSeconds(int who);

// Writes `j` (pretty-printed) to `path`; nothing when `path` is empty.
Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& j);

// A free TCP port on 127.0.0.1, and waiting (bounded) until something listens on one.
uint16_t FreePort();
bool WaitForPort(uint16_t port);

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A context length as it is written in tables: "4K" for 4096 tokens, "300" for 300.
inline std::string TokensTag(uint64_t tokens) {
  return tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "K" : std::to_string(tokens);
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The p quantile (0 < p <= 1) by nearest rank: the smallest value that a fraction p of the
// values are at or under (0.99: the p99 latency); 0 when there are none.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  const auto at =
      v.begin() + static_cast<std::ptrdiff_t>(std::clamp<size_t>(rank, 1, v.size()) - 1);
  std::nth_element(v.begin(), at, v.end());
  return *at;
}

// Rows of (metric, value, unit, note), printed as a table and written as JSON:
//   {"benchmark": NAME, "params": {...}, "metrics": {metric: value, ...}, "rows": [...]}
class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  void Param(const std::string& key, nlohmann::json value) { params_[key] = std::move(value); }
  void Metric(const std::string& metric, double value, const std::string& unit,
              const std::string& note = "");
  void Print() const;
  // Writes the JSON file when `path` is not empty; with `rows`, those in place of the metrics'.
  Status WriteJson(const std::string& path) const;
  Status WriteJson(const std::string& path, nlohmann::ordered_json rows) const;
  nlohmann::ordered_json ToJson() const;

 private:
  struct Row {
    std::string metric;
    double value;
    std::string unit, note;
  };
  std::string name_;
  nlohmann::ordered_json params_ = nlohmann::ordered_json::object();
  std::vector<Row> rows_;
};

}  // namespace objectcache::bench
