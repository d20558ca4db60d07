// The `objectcache` command: serve, fetch, kv, nvme-kv, pin, and (in a build with
// OBJECTCACHE_BUILD_BENCH) bench and demo.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#ifdef OBJECTCACHE_WITH_BENCH
#include "bench/bench_command.h"
#include "bench/report.h"
#endif
#include "cli/cli_support.h"
#include "cli/fetch_command.h"
#include "cli/kv_command.h"
#include "cli/nvme_kv_command.h"
#include "cli/serve_command.h"
#include "store/s3/s3_store.h"

// CLI11 2.1 (Debian 12) reads a config file only for the top-level app, with one [section] per
// subcommand; `objectcache serve --config FILE` is the natural spelling, so move the flag there.
std::vector<std::string> HoistConfigFlag(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 2; i + 1 < args.size(); ++i) {
    if (args[i] == "--config") {
      std::string file = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      args.insert(args.begin() + 1, {"--config", file});
      break;
    }
    if (args[i].starts_with("--config=")) {
      std::string flag = args[i];
      args.erase(args.begin() + static_cast<long>(i));
      args.insert(args.begin() + 1, flag);
      break;
    }
  }
  return args;
}

// CLI11 names a configuration key no command takes as "INI was not able to parse serve.bogus"
// (and a whole unknown section as "other.++"): say what is wrong, and what a key must be.
std::string ConfigErrorMessage(std::string_view what) {
  constexpr std::string_view kPrefix = "INI was not able to parse ";
  if (!what.starts_with(kPrefix)) return "--config: " + std::string(what);
  std::string_view item = what.substr(kPrefix.size());
  const size_t dot = item.find('.');
  if (dot == std::string_view::npos) {
    return "--config: '" + std::string(item) + "' is set outside a section: put it under the " +
           "command it is for, [serve]";
  }
  const std::string section(item.substr(0, dot));
  const std::string_view key = item.substr(dot + 1);
  if (key.empty() || key == "++") {
    return "--config: the section [" + section + "] sets what no command takes (a section " +
           "names a command, [serve], and its keys that command's long options)";
  }
  return "--config: '" + std::string(key) + "' in [" + section + "] is no option of `objectcache " +
         section + "` (a key is a long option without its dashes: listen, store, ...)";
}

// Every option's help shows its default, but CLI11 shows an empty list's as "[]": hide those.
void HideEmptyListDefaults(CLI::App* app) {
  for (CLI::Option* option : app->get_options()) {
    if (option->get_default_str() == "[]") option->default_str("");
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    HideEmptyListDefaults(sub);
  }
}

int main(int argc, char** argv) {
  CLI::App app{"ObjectCache: a KV-cache capacity tier for LLM serving"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // subcommands inherit it
  app.set_config("--config", "",
                 "Read options from a TOML/INI file: one [section] per command ([serve]), keys "
                 "are the long flag names");
  // A misspelt key in a configuration file is an error, not a silently ignored setting.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", "objectcache 0.1.0");
  objectcache::cli::AddKvCommands(&app);
  objectcache::cli::AddServeCommand(&app);
  objectcache::cli::AddNvmeKvCommands(&app);
  objectcache::cli::AddFetchCommand(&app);
  objectcache::cli::AddPinCommand(&app);
#ifdef OBJECTCACHE_WITH_BENCH
  objectcache::bench::AddBenchCommands(&app);
  objectcache::bench::AddDemoCommand(&app);
  objectcache::bench::AddReportCommand(&app);
#endif
  HideEmptyListDefaults(&app);
  objectcache::RegisterS3Store();  // --store s3://HOST:PORT/BUCKET everywhere
  std::vector<std::string> args = HoistConfigFlag(argc, argv);
  std::vector<char*> args_c;
  for (std::string& a : args) args_c.push_back(a.data());
  try {
    app.parse(static_cast<int>(args_c.size()), args_c.data());
  } catch (const CLI::ConfigError& e) {
    std::cerr << "objectcache: error: " << ConfigErrorMessage(e.what()) << "\n";
    return objectcache::cli::kExitUsage;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : objectcache::cli::kExitUsage;
  }
  return objectcache::cli::ExitCode();
}
