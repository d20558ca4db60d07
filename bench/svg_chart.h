// A grouped horizontal bar chart written as a standalone SVG file (no plotting library in
// Debian's C++ world that we would want to link): one group per configuration, one bar per
// series, a shared linear value axis, a legend.
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
};

Status WriteBarChartSvg(const std::string& path, const BarChart& chart);

}  // namespace objectcache::bench
