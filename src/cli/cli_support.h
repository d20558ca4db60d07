// Pieces shared by the `objectcache` subcommands: errors to stderr, files in and out, the
// --store and layout flags.
//
// A command reports failure by returning a non-OK Status; main prints it as one line
// ("objectcache: error: ...") and exits nonzero. Output files are written to a temporary name
// and renamed, so a failed command leaves no half-written file.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"
#include "objectcache/store.h"
#include "objectcache/store_registry.h"

namespace objectcache::cli {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitAbsent = 3;  // `kv exist`: some keys are absent

// Where a subcommand's exit code is left for main.
int& ExitCode();

// Runs `body`; a non-OK Status is printed to stderr and sets the exit code to kExitError.
void RunCommand(const std::function<Status()>& body);

// Registers subcommand NAME whose flags fill `*flags`; when it is chosen, `run(*flags)` runs
// under RunCommand. Returns the subcommand, for its flags.
template <typename Flags, typename Run>
CLI::App* AddCommand(CLI::App* parent, std::string name, std::string description,
                     const std::shared_ptr<Flags>& flags, Run run) {
  CLI::App* cmd = parent->add_subcommand(std::move(name), std::move(description));
  cmd->callback([flags, run] { RunCommand([&] { return run(*flags); }); });
  return cmd;
}

// Blocks `signals` in this thread, and so in every thread it starts after, for a sigwait on the
// set returned.
sigset_t BlockSignals(std::initializer_list<int> signals);

// Reads a whole file ("-" = stdin) of at most `max_bytes` (core/bounded_read.h).
Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes);

// The bounds of the files the commands read whole.
inline constexpr uint64_t kMaxKeysFileBytes = 64 << 20;    // 2 million keys, hex, a line each
inline constexpr uint64_t kMaxTokensFileBytes = 64 << 20;  // several million token ids
inline constexpr uint64_t kMaxCredentialsFileBytes = 16 << 20;

// Writes `bytes` to `path` atomically (temporary file, then rename); "-" = stdout.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// Streams to a file that appears under its name only on Commit(); "-" writes to stdout.
class OutputFile {
 public:
  static Result<std::unique_ptr<OutputFile>> Open(const std::string& path);
  ~OutputFile();
  Status Write(std::span<const std::byte> bytes);
  Status Commit();

 private:
  OutputFile() = default;
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// One hex chunk key per line of `text` (read from `path`, for messages); blank lines and lines
// starting with '#' are skipped. InvalidArgument names the bad line; no keys is an error too.
Result<std::vector<ChunkKey>> ParseKeyList(const std::string& text, const std::string& path);

// --store URI on a subcommand.
void AddStoreFlag(CLI::App* cmd, std::string* uri);
Result<std::unique_ptr<Store>> OpenStoreFlag(const std::string& uri,
                                             const StoreContext& context = {});

// --layout NAME|FILE.json, or the geometry flags (--num-layers, --kv-heads, --head-dim, --dtype),
// plus --tokens-per-chunk and --model that override either.
struct LayoutFlags {
  std::string layout;
  std::string model;
  std::optional<uint32_t> layers, kv_heads, head_dim, tokens_per_chunk;
  std::string dtype;
};
void AddLayoutFlags(CLI::App* cmd, LayoutFlags* flags);
Result<ModelPreset> ResolveLayoutFlags(const LayoutFlags& flags);

}  // namespace objectcache::cli
