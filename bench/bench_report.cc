#include "bench/bench_report.h"

#include <cstdio>
#include <fstream>

namespace objectcache::bench {

void Report::Metric(const std::string& metric, double value, const std::string& unit,
                    const std::string& note) {
  rows_.push_back({metric, value, unit, note});
}

void Report::Print() const {
  std::printf("\n%s  %s\n", name_.c_str(), params_.dump().c_str());
  std::printf("  %-26s %14s  %-10s %s\n", "metric", "value", "unit", "note");
  for (const Row& r : rows_) {
    std::printf("  %-26s %14.3f  %-10s %s\n", r.metric.c_str(), r.value, r.unit.c_str(),
                r.note.c_str());
  }
  std::fflush(stdout);
}

Status Report::WriteJson(const std::string& path) const {
  if (path.empty()) return Status();
  nlohmann::ordered_json j;
  j["benchmark"] = name_;
  j["params"] = params_;
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Row& r : rows_) {
    metrics[r.metric] = r.value;
    rows.push_back({{"metric", r.metric}, {"value", r.value}, {"unit", r.unit}, {"note", r.note}});
  }
  j["metrics"] = metrics;
  j["rows"] = rows;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return InternalError("writing " + path);
  return Status();
}

}  // namespace objectcache::bench
