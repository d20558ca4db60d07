// `objectcache bench model [ARGS...]`: the reference model's TTFT benchmark, which is written in
// Python (python/objectcache/bench_model.py: a Llama in torch prefilling with 0, 50 and 87.5% of
// its prefix from ObjectCache against a full recompute). It runs `python3 -m
// objectcache.bench_model` (with $OBJECTCACHE_PYTHON, else Debian's /usr/bin/python3) with this
// binary as the server it starts and ARGS passed on. Run from a
// build tree, the package the build put beside the binary (BUILD/python) goes first on
// PYTHONPATH; an installed binary leaves the path alone and python3 finds the installed package.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_command.h"
#include "bench/bench_report.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

// Replaces this process with the Python benchmark; returns only when that cannot start.
Status ExecModelBench(const std::vector<std::string>& args) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return ErrnoError("finding this binary", ec.value());
  const fs::path package = self.parent_path().parent_path() / "python";
  if (fs::exists(package / "objectcache" / "__init__.py", ec)) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path =
        package.string() + (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  // The interpreter torch and the module were installed for: Debian's, unless named.
  const char* named = std::getenv("OBJECTCACHE_PYTHON");
  std::string python = named != nullptr && *named != '\0'   ? named
                       : fs::exists("/usr/bin/python3", ec) ? "/usr/bin/python3"
                                                            : "python3";
  std::vector<std::string> argv = {python, "-m", "objectcache.bench_model"};
  bool names_server = false;
  for (const std::string& a : args)
    names_server |= a == "--objectcache" || a.starts_with("--objectcache=");
  if (!names_server) argv.insert(argv.end(), {"--objectcache", self.string()});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  ::execvp(c_argv[0], c_argv.data());
  return ErrnoError("running " + python + " (the model benchmark needs Python 3 and torch)", errno);
}

}  // namespace

void AddModelBenchCommand(CLI::App* bench) {
  CLI::App* m = bench->add_subcommand(
      "model",
      "The reference Llama in torch: TTFT with 0, 50 and 87.5% of the prefix from ObjectCache "
      "against a full recompute, and the save path's cost (python3 -m objectcache.bench_model; "
      "every argument is passed on, --help lists them)");
  m->prefix_command();
  m->set_help_flag();  // --help goes to the Python benchmark
  // RunBench: the environment every benchmark runs in (the prefault) and its error report.
  m->callback([m] { RunBench([&] { return ExecModelBench(m->remaining()); }); });
}

}  // namespace objectcache::bench
