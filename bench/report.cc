#include "bench/report.h"

#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/bench_report.h"
#include "bench/kv_fixture.h"
#include "bench/svg_chart.h"
#include "bench/ttft_experiment.h"
#include "core/page_buffer.h"
#include "objectcache/device.h"
#include "s3/xml.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;
using s3::XmlEscape;

struct ReportFlags {
  std::string out;
  bool quick = false, full = false;
  std::string ceph_dir;
  std::string markdown;
  bool no_progress = false;
};

// One core copying 256 MiB (both buffers touched first), the median of three, in Gbit/s.
double MeasureMemcpyGbps() {
  constexpr size_t kBytes = 256ull << 20;
  PageBuffer a(kBytes), b(kBytes);
  std::memset(a.data(), 1, kBytes);
  std::memset(b.data(), 2, kBytes);
  std::vector<double> gbps;
  for (int i = 0; i < 3; ++i) {
    const double t0 = NowSeconds();
    std::memcpy(b.data(), a.data(), kBytes);
    gbps.push_back(kBytes * 8 / (NowSeconds() - t0) / 1e9);
  }
  return Median(gbps);
}

// 256 MiB written to a file in `dir` and fdatasync'ed, in MB/s; the file is removed.
Result<double> MeasureDiskWriteMbps(const fs::path& dir) {
  const fs::path path = dir / ".disk-probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("creating " + path.string(), errno);
  std::string block(4 << 20, 'x');
  const double t0 = NowSeconds();
  Status status;
  for (int i = 0; i < 64 && status.ok(); ++i) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      status = ErrnoError("writing " + path.string(), errno);
    }
  }
  if (status.ok() && ::fdatasync(fd) != 0) status = ErrnoError("syncing " + path.string(), errno);
  const double seconds = NowSeconds() - t0;
  ::close(fd);
  ::unlink(path.c_str());
  OC_RETURN_IF_ERROR(status);
  return 64.0 * block.size() / seconds / 1e6;
}

Result<Machine> MeasureMachine(const fs::path& out) {
  Machine m;
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  m.link_gbps = MeasureLoopbackBytesPerSecond(1.0) * 8 / 1e9;
  if (m.link_gbps <= 0) return UnavailableError("could not measure the loopback link");
  m.memcpy_gbps = MeasureMemcpyGbps();
  OC_ASSIGN_OR_RETURN(m.disk_write_mbps, MeasureDiskWriteMbps(out));
  Result<std::shared_ptr<device::Device>> gpu = device::OpenCudaDevice(0);
  m.gpu = gpu.ok() ? (*gpu)->name() : "none (" + gpu.status().message() + ")";
  utsname u{};
  if (::uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  m.date = date;
  return m;
}

std::string MinutesSeconds(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// "yes" and "no" stand out; anything else is said as it is.
std::string HoldsBadge(const std::string& holds) {
  const char* color = holds == "yes" ? "#2e7d32" : holds == "no" ? "#c62828" : "#757575";
  return "<span class=\"holds\" style=\"background:" + std::string(color) + "\">" +
         XmlEscape(holds) + "</span>";
}

std::string HtmlTable(const Figure& f) {
  if (f.table_rows.empty()) return "";
  std::ostringstream o;
  o << "<table><tr>";
  for (const std::string& h : f.table_header) o << "<th>" << XmlEscape(h) << "</th>";
  o << "</tr>\n";
  for (const auto& row : f.table_rows) {
    o << "<tr>";
    for (const std::string& c : row) o << "<td>" << XmlEscape(c) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

std::string MarkdownTable(const Figure& f) {
  if (f.table_rows.empty()) return "";
  std::ostringstream o;
  o << "|";
  for (const std::string& h : f.table_header) o << " " << h << " |";
  o << "\n|";
  for (size_t i = 0; i < f.table_header.size(); ++i) o << "---|";
  o << "\n";
  for (const auto& row : f.table_rows) {
    o << "|";
    for (const std::string& c : row) o << " " << c << " |";
    o << "\n";
  }
  return o.str() + "\n";
}

constexpr char kStyle[] =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
    "section{border-top:1px solid #ccc;padding-top:1em;margin-top:2em}"
    "dl{display:grid;grid-template-columns:9em 1fr;gap:.3em 1em}dt{font-weight:bold}"
    ".holds{color:white;padding:.1em .5em;border-radius:.3em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.2em .5em;"
    "text-align:right}svg{display:block;margin:1em 0;max-width:100%;height:auto}";

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return ErrnoError("writing " + path.string(), errno);
  return Status();
}

const char* const kIntro =
    "Each figure states the paper's result, what this run measured, the baseline it ran beside, "
    "and whether the paper's headline holds on this machine. Every byte the experiments read "
    "back was checked.";

std::string SvgName(const Figure& f, size_t i) {
  return f.id + (f.svgs.size() > 1 ? "-" + std::to_string(i + 1) : "") + ".svg";
}

// The report in Markdown, its plots linked as `image_dir` + the SVG's name.
std::string MarkdownReport(const ReportContext& ctx, const std::vector<Figure>& figures,
                           const std::vector<std::string>& failures, double seconds,
                           const std::string& image_dir) {
  std::ostringstream md;
  md << "# ObjectCache evaluation\n\n"
     << kIntro << "\n\n**Machine:** " << ctx.machine.Describe() << ". Run: `objectcache report --"
     << (ctx.full ? "full" : "quick") << "`, " << MinutesSeconds(seconds) << ".\n\n";
  if (!failures.empty()) {
    md << "**Failed:**\n\n";
    for (const std::string& f : failures) md << "- " << f << "\n";
    md << "\n";
  }
  for (const Figure& f : figures) {
    md << "## " << f.title << "\n\n- **Paper:** " << f.paper << "\n- **Here:** " << f.ours
       << "\n- **Baseline:** " << f.baseline << "\n- **Holds here:** " << f.holds << "\n\n";
    for (size_t i = 0; i < f.svgs.size(); ++i) {
      md << "![" << f.title << "](" << image_dir << SvgName(f, i) << ")\n\n";
    }
    md << MarkdownTable(f);
  }
  return md.str();
}

// index.html, report.md with the SVGs beside it, one JSON a figure, and the Markdown again at
// ctx.markdown when it is set.
Status WriteReport(const ReportContext& ctx, const std::vector<Figure>& figures,
                   const std::vector<std::string>& failures, double seconds) {
  const fs::path out(ctx.out);
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
       << "<title>ObjectCache evaluation</title><style>" << kStyle << "</style></head><body>\n"
       << "<h1>ObjectCache evaluation</h1>\n<p>" << XmlEscape(kIntro) << "</p>\n"
       << "<p id=\"machine\"><b>Machine:</b> " << XmlEscape(ctx.machine.Describe()) << ". "
       << XmlEscape("Run: objectcache report --" + std::string(ctx.full ? "full" : "quick") + ", " +
                    MinutesSeconds(seconds) + ".")
       << "</p>\n";
  if (!failures.empty()) {
    html << "<p><b>Failed:</b></p><ul>";
    for (const std::string& f : failures) html << "<li>" << XmlEscape(f) << "</li>";
    html << "</ul>\n";
  }
  for (const Figure& f : figures) {
    html << "<section class=\"figure\" id=\"" << f.id << "\">\n<h2>" << XmlEscape(f.title)
         << "</h2>\n<dl><dt>Paper</dt><dd>" << XmlEscape(f.paper) << "</dd><dt>Here</dt><dd>"
         << XmlEscape(f.ours) << "</dd><dt>Baseline</dt><dd>" << XmlEscape(f.baseline)
         << "</dd><dt>Holds here</dt><dd>" << HoldsBadge(f.holds) << "</dd></dl>\n";
    for (size_t i = 0; i < f.svgs.size(); ++i) {
      OC_RETURN_IF_ERROR(WriteSvgFile((out / SvgName(f, i)).string(), f.svgs[i]));
      html << "<div class=\"plot\">" << f.svgs[i] << "</div>\n";
    }
    html << HtmlTable(f) << "</section>\n";
    nlohmann::ordered_json j = {{"id", f.id},
                                {"title", f.title},
                                {"paper", f.paper},
                                {"ours", f.ours},
                                {"baseline", f.baseline},
                                {"holds", f.holds},
                                {"machine", ctx.machine.Describe()},
                                {"data", f.data}};
    OC_RETURN_IF_ERROR(WriteJsonFile((out / (f.id + ".json")).string(), j));
  }
  html << "</body></html>\n";
  OC_RETURN_IF_ERROR(WriteText(out / "index.html", html.str()));
  OC_RETURN_IF_ERROR(
      WriteText(out / "report.md", MarkdownReport(ctx, figures, failures, seconds, "")));
  if (ctx.markdown.empty()) return Status();
  const fs::path md = fs::absolute(ctx.markdown);
  const std::string images = out.lexically_relative(md.parent_path()).generic_string() + "/";
  return WriteText(md, MarkdownReport(ctx, figures, failures, seconds, images));
}

Status RunReport(const ReportFlags& f) {
  if (f.out.empty()) return InvalidArgumentError("--out DIR is required");
  if (f.quick && f.full) return InvalidArgumentError("--quick and --full exclude each other");
  std::error_code ec;
  fs::create_directories(fs::path(f.out) / "raw", ec);
  fs::create_directories(fs::path(f.out) / "logs", ec);
  if (ec) return ErrnoError("creating " + f.out, ec.value());
  ReportContext ctx;
  ctx.full = f.full;
  ctx.out = fs::absolute(f.out).string();
  ctx.ceph_dir = f.ceph_dir;
  ctx.markdown = f.markdown;
  ctx.self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return ErrnoError("finding this binary", ec.value());

  const std::vector<Experiment> experiments = ReportExperiments();
  double expected = 0;
  for (const Experiment& e : experiments) expected += f.full ? e.full_seconds : e.quick_seconds;
  std::fprintf(stderr,
               "objectcache report --%s: %zu experiments, about %s (min:s) on this machine\n",
               f.full ? "full" : "quick", experiments.size(), MinutesSeconds(expected).c_str());
  const double t0 = NowSeconds();
  // Made by this run and removed after it: nothing else in DIR is ever removed.
  OC_ASSIGN_OR_RETURN(ScratchRoot scratch, ScratchRoot::MakeIn(ctx.out, "scratch"));
  ctx.scratch = scratch.path().string();
  OC_ASSIGN_OR_RETURN(ctx.machine, MeasureMachine(ctx.scratch));
  std::fprintf(stderr, "machine: %s\n", ctx.machine.Describe().c_str());

  std::vector<Figure> figures;
  std::vector<std::string> failures;
  double planned_done = 0;
  for (size_t i = 0; i < experiments.size(); ++i) {
    const Experiment& e = experiments[i];
    const double elapsed = NowSeconds() - t0;
    if (!f.no_progress) {
      // Time left: what is planned from here, scaled by how the plan has held so far once a
      // tenth of it has run (the first experiments are too short to judge by).
      const double pace = planned_done >= 0.1 * expected ? elapsed / planned_done : 1;
      const int done = static_cast<int>(20.0 * i / experiments.size());
      std::fprintf(stderr, "[%s%s] %zu/%zu %-44s %s elapsed, about %s left\n",
                   std::string(done, '#').c_str(), std::string(20 - done, '.').c_str(), i + 1,
                   experiments.size(), e.name.c_str(), MinutesSeconds(elapsed).c_str(),
                   MinutesSeconds((expected - planned_done) * pace).c_str());
    }
    Result<std::vector<Figure>> made = e.run(ctx);
    planned_done += f.full ? e.full_seconds : e.quick_seconds;
    if (!made.ok()) {
      failures.push_back(e.name + ": " + made.status().ToString());
      std::fprintf(stderr, "  failed: %s\n", made.status().ToString().c_str());
      continue;
    }
    for (Figure& fig : *made) figures.push_back(std::move(fig));
  }
  const double seconds = NowSeconds() - t0;
  OC_RETURN_IF_ERROR(WriteReport(ctx, figures, failures, seconds));
  std::printf("wrote %s/index.html, report.md and %zu figures in %s\n", ctx.out.c_str(),
              figures.size(), MinutesSeconds(seconds).c_str());
  if (!failures.empty()) {
    return InternalError(std::to_string(failures.size()) + " experiment(s) failed; see " + ctx.out +
                         "/logs");
  }
  return Status();
}

}  // namespace

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Signed(double v, int digits) { return (v >= 0 ? "+" : "") + Fixed(v, digits); }

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Machine::Describe() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%u cores, loopback TCP %.1f Gbit/s, memcpy %.1f Gbit/s, disk write %.0f MB/s, "
                "GPU: %s, %s, %s",
                cores, link_gbps, memcpy_gbps, disk_write_mbps, gpu.c_str(), kernel.c_str(),
                date.c_str());
  return buf;
}

Result<nlohmann::json> ReportContext::Bench(const std::string& name, const std::string& tag,
                                            std::vector<std::string> args) const {
  const std::string json = out + "/raw/" + tag + ".json", log = out + "/logs/" + tag + ".log";
  std::vector<std::string> argv = {self, "bench", name};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--json", json});
  ChildProcess child(argv, log);
  if (child.Wait() != 0) {
    return InternalError("objectcache bench " + name + " failed; its output is in " + log);
  }
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLossError("objectcache bench " + name + " wrote no JSON");
  return j;
}

void AddReportCommand(CLI::App* app) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* r = app->add_subcommand(
      "report",
      "The paper's evaluation in one command: measures the machine, runs every experiment with "
      "its baseline, writes DIR/index.html (one page, inline SVG plots), DIR/report.md and a "
      "JSON a figure");
  r->add_option("--out", f->out, "The report's directory")->required();
  r->add_flag("--quick", f->quick, "A slice of each experiment (the default; a few minutes)");
  r->add_flag("--full", f->full, "Every experiment at full scale (states its duration first)");
  r->add_option("--ceph", f->ceph_dir,
                "A cluster from scripts/ceph-dev start DIR: adds the RADOS figures");
  r->add_option("--markdown", f->markdown,
                "Also write the report in Markdown to FILE, its plots linked into DIR "
                "(docs/results.md is made this way)");
  r->add_flag("--no-progress", f->no_progress, "No progress lines");
  r->callback([f] { RunBench([&] { return RunReport(*f); }); });
}

}  // namespace objectcache::bench
