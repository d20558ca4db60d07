// `objectcache nvme-kv`: run the NVMe key-value controller over a store, and use it from the shell.
//
//   nvme-kv serve [--store URI] [--shm NAME] [--prefix P] [--queues N] [--queue-entries N]
//                 [--data-size SIZE] [--max-value SIZE] [--workers N] [--poll-us N] ...
//   nvme-kv identify [--shm NAME]
//   nvme-kv store [--shm NAME] KEY FILE [--create-only | --update-only]
//   nvme-kv retrieve [--shm NAME] KEY [--out FILE] [--offset N --length N]
//   nvme-kv exist [--shm NAME] KEY...           (exit 3 if any is absent)
//   nvme-kv delete [--shm NAME] KEY...
//   nvme-kv list [--shm NAME] [--from KEY] [--max N]
//
// KEY is 1 to 16 bytes written as 2 to 32 hex digits (a chunk key is 32). The client commands
// attach as the controller's one host for the duration of the command.
#pragma once

#include <CLI/CLI.hpp>

namespace objectcache::cli {

void AddNvmeKvCommands(CLI::App* app);

}  // namespace objectcache::cli
