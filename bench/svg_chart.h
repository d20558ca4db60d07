// Charts as standalone SVG (no plotting library in Debian's C++ world that we would want to
// link): a grouped horizontal bar chart (one group per configuration, one bar per series, a
// shared linear value axis, a legend), a line chart (linear or log axes, a legend, optional
// vertical and horizontal reference lines) and a heatmap (one cell a value, cells past a
// threshold outlined). Each is a string to inline in a page or to write to a file.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::bench {

struct BarChart {
  std::string title, subtitle, value_label;
  std::vector<std::string> series;  // in legend and bar order
  struct Group {
    std::string label;
    std::map<std::string, double> values;  // by series; a missing series draws no bar
  };
  std::vector<Group> groups;
  bool stacked = false;  // one bar a group, its series' values end to end
};

std::string BarChartSvg(const BarChart& chart);
Status WriteBarChartSvg(const std::string& path, const BarChart& chart);

struct LineChart {
  std::string title, subtitle, x_label, y_label;
  bool log_x = false, log_y = false;
  struct Series {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
    bool dashed = false;
  };
  std::vector<Series> series;
  struct Reference {
    double value = 0;
    std::string label;
  };
  std::vector<Reference> x_references, y_references;  // dotted lines across the plot
};

std::string LineChartSvg(const LineChart& chart);

struct Heatmap {
  std::string title, subtitle, x_label, y_label, value_label;
  std::vector<std::string> x_ticks, y_ticks;  // columns, rows (the first row at the bottom)
  std::vector<std::vector<double>> values;    // [row][column]
  double outline_above = 0;                   // > 0: cells above it outlined
  std::string outline_label;                  // what an outlined cell means
};

std::string HeatmapSvg(const Heatmap& chart);

// Writes `svg` to `path`.
Status WriteSvgFile(const std::string& path, const std::string& svg);

}  // namespace objectcache::bench
