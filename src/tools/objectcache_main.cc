// The `objectcache` command: serve, kv, bench.
#include <CLI/CLI.hpp>

#include "bench/bench_command.h"
#include "cli/cli_support.h"
#include "cli/kv_command.h"
#include "cli/serve_command.h"

int main(int argc, char** argv) {
  CLI::App app{"ObjectCache: a KV-cache capacity tier for LLM serving"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "objectcache 0.1.0");
  objectcache::cli::AddKvCommands(&app);
  objectcache::cli::AddServeCommand(&app);
  objectcache::bench::AddBenchCommands(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : objectcache::cli::kExitUsage;
  }
  return objectcache::cli::ExitCode();
}
