#include "cli/cli_support.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "core/bounded_read.h"
#include "objectcache/store_registry.h"

namespace objectcache::cli {

int& ExitCode() {
  static int code = kExitOk;
  return code;
}

void RunCommand(const std::function<Status()>& body) {
  // A failed allocation or library call ends the command with its message, not an abort.
  Status s = CallCatchingExceptions(body);
  if (!s.ok()) {
    std::cerr << "objectcache: error: " << s.ToString() << "\n";
    ExitCode() = kExitError;
  }
}

sigset_t BlockSignals(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  if (path == "-") return ReadBounded(std::cin, max_bytes, "stdin");
  std::ifstream file(path, std::ios::binary);
  if (!file) return ErrnoError("opening " + path, errno);
  return ReadBounded(file, max_bytes, path);
}

Result<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path) {
  std::unique_ptr<OutputFile> f(new OutputFile());
  f->path_ = path;
  if (path == "-") {
    f->fd_ = STDOUT_FILENO;
    return f;
  }
  f->temp_path_ = path + ".tmp-" + std::to_string(::getpid());
  f->fd_ = ::open(f->temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (f->fd_ < 0) return ErrnoError("creating " + f->temp_path_, errno);
  return f;
}

OutputFile::~OutputFile() {
  if (!temp_path_.empty()) {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_path_.c_str());
  }
}

Status OutputFile::Write(std::span<const std::byte> bytes) {
  const char* p = reinterpret_cast<const char*>(bytes.data());
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("writing " + (path_ == "-" ? std::string("stdout") : path_), errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

Status OutputFile::Commit() {
  if (temp_path_.empty()) return Status();
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return ErrnoError("writing " + path_, errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    return ErrnoError("renaming to " + path_, errno);
  committed_ = true;
  return Status();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  OC_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path));
  OC_RETURN_IF_ERROR(out->Write(AsBytes(bytes)));
  return out->Commit();
}

// One hex chunk key per line; blank lines and lines starting with '#' are skipped.
Result<std::vector<ChunkKey>> ParseKeyList(const std::string& text, const std::string& path) {
  std::vector<ChunkKey> keys;
  std::istringstream in(text);
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    Result<ChunkKey> k = ChunkKey::FromHex(line);
    if (!k.has_value()) return k.error().Annotate(path + " line " + std::to_string(line_no));
    keys.push_back(*k);
  }
  if (keys.empty()) return InvalidArgumentError(path + " holds no keys");
  return keys;
}

void AddStoreFlag(CLI::App* cmd, std::string* uri) {
  *uri = std::string(kDefaultStoreUri);
  cmd->add_option("--store", *uri,
                  "Store URI: file:///path[?capacity=10GiB&durable=true], a plain path, "
                  "rados://POOL?conf=PATH&namespace=NS, s3://HOST:PORT/BUCKET, or mem://");
}

Result<std::unique_ptr<Store>> OpenStoreFlag(const std::string& uri, const StoreContext& context) {
  Result<std::unique_ptr<Store>> s = OpenStore(uri, context);
  if (!s.has_value()) return s.error().Annotate("opening store " + uri);
  return s;
}

void AddLayoutFlags(CLI::App* cmd, LayoutFlags* f) {
  cmd->add_option("--layout", f->layout,
                  "Model layout: llama-3.1-8b, llama-3.1-70b, granite-3.3-8b, "
                  "deepseek-r1-distill-qwen-7b, or a JSON file");
  cmd->add_option("--model", f->model, "Model name for the key namespace (default: the layout's)");
  cmd->add_option("--num-layers", f->layers, "Custom layout: number of layers");
  cmd->add_option("--kv-heads", f->kv_heads, "Custom layout: KV heads");
  cmd->add_option("--head-dim", f->head_dim, "Custom layout: head dimension");
  cmd->add_option("--dtype", f->dtype, "Custom layout: bf16, fp16, fp8 or fp32");
  cmd->add_option("--tokens-per-chunk", f->tokens_per_chunk, "Tokens per chunk G (default 16)");
}

Result<ModelPreset> ResolveLayoutFlags(const LayoutFlags& f) {
  const bool geometry = f.layers || f.kv_heads || f.head_dim || !f.dtype.empty();
  ModelPreset m;
  if (!f.layout.empty()) {
    if (geometry) {
      return InvalidArgumentError("give either --layout or the custom layout flags, not both");
    }
    OC_ASSIGN_OR_RETURN(m, ResolveModel(f.layout));
  } else if (geometry) {
    if (!f.layers || !f.kv_heads || !f.head_dim || f.dtype.empty()) {
      return InvalidArgumentError(
          "a custom layout needs --num-layers, --kv-heads, --head-dim and --dtype");
    }
    m.name = "custom";
    m.layout.num_layers = *f.layers;
    m.layout.num_kv_heads = *f.kv_heads;
    m.layout.head_dim = *f.head_dim;
    OC_ASSIGN_OR_RETURN(m.layout.dtype, ParseKvDtype(f.dtype));
  } else {
    return InvalidArgumentError("no layout: give --layout NAME or the custom layout flags");
  }
  if (f.tokens_per_chunk) m.layout.tokens_per_chunk = *f.tokens_per_chunk;
  if (!f.model.empty()) m.name = f.model;
  OC_RETURN_IF_ERROR(m.layout.Validate());
  return m;
}

}  // namespace objectcache::cli
