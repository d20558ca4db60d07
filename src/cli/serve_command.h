// `objectcache serve`: the S3-compatible server (docs/s3-api.md), in front of any store.
#pragma once

#include <CLI/CLI.hpp>

namespace objectcache::cli {

void AddServeCommand(CLI::App* app);

}  // namespace objectcache::cli
