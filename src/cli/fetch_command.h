// The commands that talk to a server: `objectcache fetch`, aggregated layerwise retrieval
// (docs/wire-format.md), the layer-major bytes written out, every frame checked; and
// `objectcache pin`, chunks pinned against eviction for a time.
#pragma once

#include <CLI/CLI.hpp>

namespace objectcache::cli {

void AddFetchCommand(CLI::App* app);
void AddPinCommand(CLI::App* app);

}  // namespace objectcache::cli
