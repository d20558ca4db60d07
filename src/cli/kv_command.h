// `objectcache kv`: store, retrieve, test, delete and list objects and chunks in any store.
//
//   kv put [--store URI] KEY FILE            kv get [--store URI] KEY [--out FILE]
//   kv exist [--store URI] KEY...            kv rm [--store URI] KEY...
//   kv ls [--store URI] [--prefix P]
//   kv put-chunk [--store URI] --layout NAME --key HEX FILE
//   kv get-layers [--store URI] --layout NAME --keys FILE --layers A:B [--out FILE]
//   kv keys --layout NAME [--tenant SALT] (--tokens FILE | TOKEN...)
//
// These shapes are an interface: scripts depend on them. Options may be added.
#pragma once

#include <CLI/CLI.hpp>

namespace objectcache::cli {

void AddKvCommands(CLI::App* app);

}  // namespace objectcache::cli
