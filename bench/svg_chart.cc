#include "bench/svg_chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "s3/xml.h"

namespace objectcache::bench {
namespace {

using s3::XmlEscape;

constexpr const char* kColors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52",
                                   "#8172b3", "#937860", "#da8bc3", "#8c8c8c"};

// The page's frame: a white background, the title and the subtitle.
void OpenSvg(std::ostringstream& o, double width, double height, const std::string& title,
             const std::string& subtitle) {
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << XmlEscape(title)
    << "</text>\n<text x=\"10\" y=\"40\" fill=\"#555\">" << XmlEscape(subtitle) << "</text>\n";
}

// A number as an axis label: short, no trailing zeros.
std::string Tick(double v) {
  std::ostringstream o;
  o << std::setprecision(4) << v;
  return o.str();
}

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

std::string BarChartSvg(const BarChart& chart) {
  constexpr double kLabelWidth = 330, kPlotWidth = 560, kBar = 11, kGroupGap = 12, kTop = 70;
  double max = 0;
  for (const auto& g : chart.groups) {
    double sum = 0;
    for (const auto& [series, v] : g.values) max = std::max(max, v), sum += std::max(0.0, v);
    if (chart.stacked) max = std::max(max, sum);
  }
  if (max <= 0) max = 1;
  const double step = NiceStep(max, 5);
  const double axis_max = std::ceil(max / step) * step;
  // A group is a bar a series, or one bar of every series' segments end to end.
  const size_t bars = chart.stacked ? 1 : chart.series.size();
  const double group_height = kBar * bars + kGroupGap;
  const double plot_height = group_height * chart.groups.size();
  const double width = kLabelWidth + kPlotWidth + 40;
  const double height = kTop + plot_height + 60 + 18 * ((chart.series.size() + 3) / 4);
  auto x_of = [&](double v) { return kLabelWidth + kPlotWidth * v / axis_max; };

  std::ostringstream o;
  OpenSvg(o, width, height, chart.title, chart.subtitle);
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
    o << "<text x=\"" << kLabelWidth - 8 << "\" y=\"" << y0 + kBar * bars / 2.0 + 4
      << "\" text-anchor=\"end\">" << XmlEscape(g.label) << "</text>\n";
    double start = 0;  // a stacked bar's next segment begins here
    for (size_t si = 0; si < chart.series.size(); ++si) {
      auto it = g.values.find(chart.series[si]);
      if (it == g.values.end()) continue;
      const double v = std::max(0.0, it->second);
      const double from = chart.stacked ? start : 0;
      o << "<rect x=\"" << x_of(from) << "\" y=\"" << y0 + (chart.stacked ? 0 : si * kBar)
        << "\" width=\"" << std::max(0.5, x_of(from + v) - x_of(from)) << "\" height=\"" << kBar - 1
        << "\" fill=\"" << kColors[si % 8] << "\"><title>" << XmlEscape(chart.series[si]) << ": "
        << it->second << "</title></rect>\n";
      start += v;
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
  return o.str();
}

Status WriteBarChartSvg(const std::string& path, const BarChart& chart) {
  return WriteSvgFile(path, BarChartSvg(chart));
}

Status WriteSvgFile(const std::string& path, const std::string& svg) {
  std::ofstream out(path);
  out << svg;
  out.close();
  if (!out) return ErrnoError("writing " + path, errno);
  return Status();
}

std::string LineChartSvg(const LineChart& chart) {
  constexpr double kLeft = 70, kTop = 60, kWidth = 560, kHeight = 300;
  double x_min = INFINITY, x_max = -INFINITY, y_min = INFINITY, y_max = -INFINITY;
  for (const auto& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if ((chart.log_x && x <= 0) || (chart.log_y && y <= 0)) continue;
      x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
  }
  for (const auto& r : chart.x_references)
    x_min = std::min(x_min, r.value), x_max = std::max(x_max, r.value);
  for (const auto& r : chart.y_references)
    y_min = std::min(y_min, r.value), y_max = std::max(y_max, r.value);
  if (!(x_min <= x_max)) x_min = 0, x_max = 1;
  if (!(y_min <= y_max)) y_min = 0, y_max = 1;
  // Axis ranges: decades on a log axis, nice steps from 0 on a linear one.
  std::vector<double> x_ticks, y_ticks;
  auto axis = [](bool log, double& lo, double& hi, std::vector<double>& ticks) {
    if (log) {
      lo = std::pow(10.0, std::floor(std::log10(lo)));
      hi = std::pow(10.0, std::ceil(std::log10(hi)));
      if (hi <= lo) hi = lo * 10;
      for (double v = lo; v <= hi * 1.001; v *= 10) ticks.push_back(v);
    } else {
      lo = std::min(0.0, lo);
      const double step = NiceStep(hi > lo ? hi - lo : 1, 5);
      hi = lo + std::ceil((hi - lo) / step) * step;
      if (hi <= lo) hi = lo + step;
      for (double v = lo; v <= hi + step / 2; v += step) ticks.push_back(v);
    }
  };
  axis(chart.log_x, x_min, x_max, x_ticks);
  axis(chart.log_y, y_min, y_max, y_ticks);
  auto scale = [](bool log, double v, double lo, double hi) {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
               : (v - lo) / (hi - lo);
  };
  auto px = [&](double x) { return kLeft + kWidth * scale(chart.log_x, x, x_min, x_max); };
  auto py = [&](double y) { return kTop + kHeight * (1 - scale(chart.log_y, y, y_min, y_max)); };
  const double height = kTop + kHeight + 60 + 18 * ((chart.series.size() + 2) / 3);
  std::ostringstream o;
  OpenSvg(o, kLeft + kWidth + 40, height, chart.title, chart.subtitle);
  for (double v : x_ticks) {
    o << "<line x1=\"" << px(v) << "\" y1=\"" << kTop << "\" x2=\"" << px(v) << "\" y2=\""
      << kTop + kHeight << "\" stroke=\"#ddd\"/><text x=\"" << px(v) << "\" y=\""
      << kTop + kHeight + 15 << "\" text-anchor=\"middle\">" << Tick(v) << "</text>\n";
  }
  for (double v : y_ticks) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << py(v) << "\" x2=\"" << kLeft + kWidth << "\" y2=\""
      << py(v) << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 5 << "\" y=\"" << py(v) + 4
      << "\" text-anchor=\"end\">" << Tick(v) << "</text>\n";
  }
  o << "<text x=\"" << kLeft + kWidth / 2 << "\" y=\"" << kTop + kHeight + 32
    << "\" text-anchor=\"middle\">" << XmlEscape(chart.x_label) << "</text>\n<text x=\"14\" y=\""
    << kTop + kHeight / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    << kTop + kHeight / 2 << ")\">" << XmlEscape(chart.y_label) << "</text>\n";
  for (const auto& r : chart.x_references) {
    o << "<line x1=\"" << px(r.value) << "\" y1=\"" << kTop << "\" x2=\"" << px(r.value)
      << "\" y2=\"" << kTop + kHeight << "\" stroke=\"#333\" stroke-dasharray=\"2,3\"/><text x=\""
      << px(r.value) + 4 << "\" y=\"" << kTop + 12 << "\">" << XmlEscape(r.label) << "</text>\n";
  }
  for (const auto& r : chart.y_references) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << py(r.value) << "\" x2=\"" << kLeft + kWidth
      << "\" y2=\"" << py(r.value) << "\" stroke=\"#333\" stroke-dasharray=\"2,3\"/><text x=\""
      << kLeft + 4 << "\" y=\"" << py(r.value) - 4 << "\">" << XmlEscape(r.label) << "</text>\n";
  }
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const auto& s = chart.series[si];
    std::ostringstream points;
    for (const auto& [x, y] : s.points) {
      if ((chart.log_x && x <= 0) || (chart.log_y && y <= 0)) continue;
      points << px(x) << "," << py(y) << " ";
      o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\""
        << kColors[si % 8] << "\"><title>" << XmlEscape(s.name) << ": " << Tick(x) << ", "
        << Tick(y) << "</title></circle>\n";
    }
    o << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << kColors[si % 8] << "\""
      << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << " points=\"" << points.str() << "\"/>\n";
    const double x = 10 + (si % 3) * 210, y = kTop + kHeight + 50 + 18 * (si / 3);
    o << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"12\" height=\"12\" fill=\""
      << kColors[si % 8] << "\"/><text x=\"" << x + 17 << "\" y=\"" << y + 1 << "\">"
      << XmlEscape(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string HeatmapSvg(const Heatmap& chart) {
  constexpr double kLeft = 90, kTop = 60, kCellW = 90, kCellH = 34;
  const double w = kCellW * chart.x_ticks.size(), h = kCellH * chart.y_ticks.size();
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& row : chart.values) {
    for (double v : row) {
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (!(lo <= hi)) lo = hi = 1;
  std::ostringstream o;
  OpenSvg(o, kLeft + w + 40, kTop + h + 70, chart.title, chart.subtitle);
  for (size_t r = 0; r < chart.values.size() && r < chart.y_ticks.size(); ++r) {
    const double y = kTop + h - (r + 1) * kCellH;
    o << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + kCellH / 2 + 4 << "\" text-anchor=\"end\">"
      << XmlEscape(chart.y_ticks[r]) << "</text>\n";
    for (size_t c = 0; c < chart.values[r].size() && c < chart.x_ticks.size(); ++c) {
      const double v = chart.values[r][c];
      // White to dark blue on a log scale.
      const double t = hi > lo && v > 0 ? std::log(v / lo) / std::log(hi / lo) : 0;
      const int shade = static_cast<int>(235 - 170 * t);
      const bool outlined = chart.outline_above > 0 && v > chart.outline_above;
      o << "<rect x=\"" << kLeft + c * kCellW << "\" y=\"" << y << "\" width=\"" << kCellW - 2
        << "\" height=\"" << kCellH - 2 << "\" fill=\"rgb(" << shade << "," << shade + 10
        << ",255)\"" << (outlined ? " stroke=\"#c44e52\" stroke-width=\"3\"" : "") << "><title>"
        << XmlEscape(chart.x_ticks[c] + ", " + chart.y_ticks[r]) << ": " << Tick(v)
        << "</title></rect>\n<text x=\"" << kLeft + c * kCellW + kCellW / 2 - 1 << "\" y=\""
        << y + kCellH / 2 + 4 << "\" text-anchor=\"middle\" fill=\""
        << (t > 0.6 ? "white" : "black") << "\">" << Tick(v) << "</text>\n";
    }
  }
  for (size_t c = 0; c < chart.x_ticks.size(); ++c) {
    o << "<text x=\"" << kLeft + c * kCellW + kCellW / 2 << "\" y=\"" << kTop + h + 15
      << "\" text-anchor=\"middle\">" << XmlEscape(chart.x_ticks[c]) << "</text>\n";
  }
  o << "<text x=\"" << kLeft + w / 2 << "\" y=\"" << kTop + h + 32 << "\" text-anchor=\"middle\">"
    << XmlEscape(chart.x_label) << "</text>\n<text x=\"10\" y=\"" << kTop + h + 52 << "\">"
    << XmlEscape(chart.y_label + " (rows); cells: " + chart.value_label +
                 (chart.outline_above > 0 ? "; outlined: " + chart.outline_label : ""))
    << "</text>\n</svg>\n";
  return o.str();
}

}  // namespace objectcache::bench
