#include "bench/svg_chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <sstream>

#include "s3/xml.h"

namespace objectcache::bench {
namespace {

using s3::XmlEscape;

// A "nice" axis step: 1, 2 or 5 times a power of ten, about `ticks` steps to `max`.
double NiceStep(double max, int ticks) {
  const double raw = max / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

Status WriteBarChartSvg(const std::string& path, const BarChart& chart) {
  static constexpr const char* kColors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52",
                                            "#8172b3", "#937860", "#da8bc3", "#8c8c8c"};
  constexpr double kLabelWidth = 330, kPlotWidth = 560, kBar = 11, kGroupGap = 12, kTop = 70;
  double max = 0;
  for (const auto& g : chart.groups) {
    for (const auto& [series, v] : g.values) max = std::max(max, v);
  }
  if (max <= 0) max = 1;
  const double step = NiceStep(max, 5);
  const double axis_max = std::ceil(max / step) * step;
  const double group_height = kBar * chart.series.size() + kGroupGap;
  const double plot_height = group_height * chart.groups.size();
  const double width = kLabelWidth + kPlotWidth + 40;
  const double height = kTop + plot_height + 60 + 18 * ((chart.series.size() + 3) / 4);
  auto x_of = [&](double v) { return kLabelWidth + kPlotWidth * v / axis_max; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << XmlEscape(chart.title)
    << "</text>\n<text x=\"10\" y=\"40\" fill=\"#555\">" << XmlEscape(chart.subtitle)
    << "</text>\n";
  // Grid lines and value labels.
  for (double v = 0; v <= axis_max + step / 2; v += step) {
    o << "<line x1=\"" << x_of(v) << "\" y1=\"" << kTop - 5 << "\" x2=\"" << x_of(v) << "\" y2=\""
      << kTop + plot_height << "\" stroke=\"#ddd\"/>\n<text x=\"" << x_of(v) << "\" y=\""
      << kTop + plot_height + 15 << "\" text-anchor=\"middle\">" << v << "</text>\n";
  }
  o << "<text x=\"" << kLabelWidth + kPlotWidth / 2 << "\" y=\"" << kTop + plot_height + 32
    << "\" text-anchor=\"middle\">" << XmlEscape(chart.value_label) << "</text>\n";
  for (size_t gi = 0; gi < chart.groups.size(); ++gi) {
    const auto& g = chart.groups[gi];
    const double y0 = kTop + gi * group_height;
    o << "<text x=\"" << kLabelWidth - 8 << "\" y=\"" << y0 + kBar * chart.series.size() / 2 + 4
      << "\" text-anchor=\"end\">" << XmlEscape(g.label) << "</text>\n";
    for (size_t si = 0; si < chart.series.size(); ++si) {
      auto it = g.values.find(chart.series[si]);
      if (it == g.values.end()) continue;
      o << "<rect x=\"" << kLabelWidth << "\" y=\"" << y0 + si * kBar << "\" width=\""
        << std::max(0.5, x_of(it->second) - kLabelWidth) << "\" height=\"" << kBar - 1
        << "\" fill=\"" << kColors[si % 8] << "\"><title>" << XmlEscape(chart.series[si]) << ": "
        << it->second << "</title></rect>\n";
    }
  }
  // Legend, four to a line.
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const double x = 10 + (si % 4) * 170, y = kTop + plot_height + 48 + 18 * (si / 4);
    o << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"12\" height=\"12\" fill=\""
      << kColors[si % 8] << "\"/><text x=\"" << x + 17 << "\" y=\"" << y + 1 << "\">"
      << XmlEscape(chart.series[si]) << "</text>\n";
  }
  o << "</svg>\n";
  std::ofstream out(path);
  out << o.str();
  out.close();
  if (!out) return ErrnoError("writing " + path, errno);
  return Status();
}

}  // namespace objectcache::bench
