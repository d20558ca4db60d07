// `objectcache fetch`: aggregated layerwise retrieval from a server (docs/wire-format.md), the
// layer-major bytes written out, every frame checked.
#pragma once

#include <CLI/CLI.hpp>

namespace objectcache::cli {

void AddFetchCommand(CLI::App* app);

}  // namespace objectcache::cli
