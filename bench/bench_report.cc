#include "bench/bench_report.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace objectcache::bench {

void RunBench(const std::function<Status()>& body) {
  // Timed receives should not pay for first touches of fresh memory under a hypervisor with
  // shadow page tables (src/core/page_buffer.h): the benchmark and every server it starts
  // prefault their buffers, unless the caller's environment says otherwise.
  ::setenv("OBJECTCACHE_PREFAULT", "1", /*overwrite=*/0);
  Status s = body();
  if (!s.ok()) {
    std::cerr << "objectcache: error: " << s.ToString() << "\n";
    std::exit(1);
  }
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log) {
  // Everything the child needs is built before fork: between fork and exec a child of a
  // multithreaded process may only make async-signal-safe calls (no malloc: another thread
  // may have held its lock at the fork).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  if (::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
  return pid_ > 0;
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ChildProcess::Stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

uint16_t FreePort() {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

bool WaitForPort(uint16_t port) {
  namespace asio = boost::asio;
  for (int i = 0; i < 200; ++i) {
    asio::io_context ioc;
    asio::ip::tcp::socket s(ioc);
    boost::system::error_code ec;
    s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    if (!ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

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

Status Report::WriteJson(const std::string& path) const { return WriteJsonFile(path, ToJson()); }

Status Report::WriteJson(const std::string& path, nlohmann::ordered_json rows) const {
  nlohmann::ordered_json j = ToJson();
  j["rows"] = std::move(rows);
  return WriteJsonFile(path, j);
}

nlohmann::ordered_json Report::ToJson() const {
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
  return j;
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the command name (which may hold spaces) start after its closing ')'.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& j) {
  if (path.empty()) return Status();
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return InternalError("writing " + path);
  return Status();
}

}  // namespace objectcache::bench
