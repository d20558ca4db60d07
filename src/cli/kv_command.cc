#include "cli/kv_command.h"

#include <charconv>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/cli_support.h"
#include "core/hex.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/layer_reader.h"

namespace objectcache::cli {
namespace {

// Token ids separated by whitespace or commas.
Result<std::vector<uint32_t>> ParseTokens(std::string_view text) {
  constexpr std::string_view kSeparators = " \n\t\r,";
  std::vector<uint32_t> tokens;
  size_t i = 0;
  while ((i = text.find_first_not_of(kSeparators, i)) != std::string_view::npos) {
    const std::string_view token = text.substr(i, text.find_first_of(kSeparators, i) - i);
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size()) {
      const bool cut = token.size() > 24;
      return InvalidArgumentError("token " + std::to_string(tokens.size()) + " ('" +
                                  EscapeControlBytes(token.substr(0, 24)) + (cut ? "...'" : "'") +
                                  ") is not an integer in 0..4294967295");
    }
    tokens.push_back(v);
    i += token.size();
  }
  return tokens;
}

struct PutFlags {
  std::string store, key, file;
};

Status Put(const PutFlags& f) {
  OC_RETURN_IF_ERROR(ValidateKey(f.key));
  // Any size: the value is held whole in memory to store it (docs/cli.md).
  OC_ASSIGN_OR_RETURN(std::string value, ReadFile(f.file, UINT64_MAX));
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(f.store));
  return s->Put(f.key, AsBytes(value)).Annotate("storing " + f.key);
}

struct GetFlags {
  std::string store, key, out = "-";
};

Status Get(const GetFlags& f) {
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(f.store));
  OC_ASSIGN_OR_RETURN(std::string value, ReadWholeObject(*s, f.key));
  return WriteFileAtomically(f.out, value);
}

// Checks every key, then opens the store: a bad key is refused before anything is touched.
Result<std::unique_ptr<Store>> OpenStoreForKeys(const std::string& store,
                                                const std::vector<std::string>& keys) {
  for (const std::string& k : keys) OC_RETURN_IF_ERROR(ValidateKey(k));
  return OpenStoreFlag(store);
}

struct ExistFlags {
  std::string store;
  std::vector<std::string> keys;
  bool prefix_count = false;
};

Status Exist(const ExistFlags& f) {
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreForKeys(f.store, f.keys));
  if (f.prefix_count) {
    OC_ASSIGN_OR_RETURN(size_t n, s->CountPresentPrefix(f.keys));
    std::cout << n << "\n";
    if (n < f.keys.size()) ExitCode() = kExitAbsent;
    return Status();
  }
  OC_ASSIGN_OR_RETURN(std::vector<bool> present, s->Exist(f.keys));
  for (size_t i = 0; i < f.keys.size(); ++i) {
    std::cout << (present[i] ? "present " : "absent ") << f.keys[i] << "\n";
    if (!present[i]) ExitCode() = kExitAbsent;
  }
  return Status();
}

struct RmFlags {
  std::string store;
  std::vector<std::string> keys;
  bool force = false;
};

Status Rm(const RmFlags& f) {
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreForKeys(f.store, f.keys));
  for (const std::string& k : f.keys) {
    Status st = s->Delete(k);
    if (st.code() == StatusCode::kNotFound && f.force) continue;
    OC_RETURN_IF_ERROR(st);
  }
  return Status();
}

struct LsFlags {
  std::string store, prefix;
  bool long_format = false;
};

Status Ls(const LsFlags& f) {
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(f.store));
  ListOptions options{.prefix = f.prefix, .start_after = "", .max_keys = 1000};
  for (;;) {
    OC_ASSIGN_OR_RETURN(ListPage page, s->List(options));
    for (const ObjectInfo& o : page.objects) {
      if (f.long_format) std::cout << o.size << "\t";
      std::cout << EscapeControlBytes(o.key) << "\n";  // one name a line, whatever it holds
    }
    if (!page.truncated || page.objects.empty()) break;
    options.start_after = page.objects.back().key;
  }
  return Status();
}

struct PutChunkFlags {
  std::string store;
  LayoutFlags layout;
  std::string key, file;
};

Status PutChunk(const PutChunkFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(f.layout));
  OC_ASSIGN_OR_RETURN(ChunkKey k, ChunkKey::FromHex(f.key));
  OC_ASSIGN_OR_RETURN(std::string kv_bytes, ReadFile(f.file, m.layout.ChunkKvBytes()));
  if (kv_bytes.size() != m.layout.ChunkKvBytes()) {
    return InvalidArgumentError(f.file + " is " + std::to_string(kv_bytes.size()) +
                                " bytes; a chunk of " + m.layout.ToString() + " is " +
                                std::to_string(m.layout.ChunkKvBytes()));
  }
  OC_ASSIGN_OR_RETURN(std::string object, EncodeChunkObject(m.layout, k, AsBytes(kv_bytes)));
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(f.store));
  return s->Put(k.ToHex(), AsBytes(object)).Annotate("storing chunk " + k.ToHex());
}

struct GetLayersFlags {
  std::string store;
  LayoutFlags layout;
  std::string keys_file, layers, out = "-";
};

Status GetLayers(const GetLayersFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(f.layout));
  OC_ASSIGN_OR_RETURN(LayerRange range, LayerRange::Parse(f.layers, m.layout.num_layers));
  OC_ASSIGN_OR_RETURN(std::string text, ReadFile(f.keys_file, kMaxKeysFileBytes));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> keys, ParseKeyList(text, f.keys_file));
  OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(f.store));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> output, OutputFile::Open(f.out));
  OC_RETURN_IF_ERROR(ReadLayersLayerMajor(
      *s, m.layout, keys, range,
      [&](uint32_t, std::span<const std::byte> bytes) { return output->Write(bytes); }));
  return output->Commit();
}

struct KeysFlags {
  LayoutFlags layout;
  std::string tenant, adapter, cache_salt, tokens_file;
  std::vector<std::string> tokens;
  bool show_namespace = false;
};

Status Keys(const KeysFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(f.layout));
  std::string text;
  if (!f.tokens_file.empty()) {
    OC_ASSIGN_OR_RETURN(text, ReadFile(f.tokens_file, kMaxTokensFileBytes));
  }
  for (const std::string& t : f.tokens) text += " " + t;
  OC_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, ParseTokens(text));
  KeyNamespace ns(
      m.name, m.layout,
      KeyScope{.tenant_salt = f.tenant, .adapter = f.adapter, .cache_salt = f.cache_salt});
  if (f.show_namespace) std::cout << "namespace " << ChunkKey(ns.id()).ToHex() << "\n";
  for (const ChunkKey& k : ns.KeysForTokens(ids)) std::cout << k.ToHex() << "\n";
  return Status();
}

}  // namespace

void AddKvCommands(CLI::App* app) {
  CLI::App* kv = app->add_subcommand("kv", "Store and retrieve objects and chunks");
  kv->require_subcommand(1);

  auto put = std::make_shared<PutFlags>();
  CLI::App* cmd = AddCommand(kv, "put", "Store FILE (- for stdin) as object KEY", put, Put);
  AddStoreFlag(cmd, &put->store);
  cmd->add_option("KEY", put->key, "Object name (1 to 1024 bytes)")->required();
  cmd->add_option("FILE", put->file, "File to store, - for stdin")->required();

  auto get = std::make_shared<GetFlags>();
  cmd = AddCommand(kv, "get", "Write object KEY to stdout or --out FILE", get, Get);
  AddStoreFlag(cmd, &get->store);
  cmd->add_option("KEY", get->key, "Object name")->required();
  cmd->add_option("--out,-o", get->out, "Output file (written whole or not at all); - for stdout");

  auto exist = std::make_shared<ExistFlags>();
  cmd = AddCommand(kv, "exist",
                   "Print 'present KEY' or 'absent KEY' for each key; exit 3 if any is absent",
                   exist, Exist);
  AddStoreFlag(cmd, &exist->store);
  cmd->add_option("KEY", exist->keys, "Object names, in order")->required();
  cmd->add_flag("--prefix-count", exist->prefix_count,
                "Print only how many leading keys exist (the cached prefix length)");

  auto rm = std::make_shared<RmFlags>();
  cmd = AddCommand(kv, "rm", "Delete objects", rm, Rm);
  AddStoreFlag(cmd, &rm->store);
  cmd->add_option("KEY", rm->keys, "Object names")->required();
  cmd->add_flag("--force,-f", rm->force, "A missing object is not an error");

  auto ls = std::make_shared<LsFlags>();
  cmd = AddCommand(kv, "ls",
                   "List object names in byte order, one a line (control bytes as \\xNN, a "
                   "backslash as \\\\)",
                   ls, Ls);
  AddStoreFlag(cmd, &ls->store);
  cmd->add_option("--prefix", ls->prefix, "Only names starting with this");
  cmd->add_flag("--long,-l", ls->long_format, "Print SIZE<tab>NAME");

  auto put_chunk = std::make_shared<PutChunkFlags>();
  cmd = AddCommand(kv, "put-chunk",
                   "Store one chunk's raw layer-major KV from FILE as a chunk object", put_chunk,
                   PutChunk);
  AddStoreFlag(cmd, &put_chunk->store);
  AddLayoutFlags(cmd, &put_chunk->layout);
  cmd->add_option("--key", put_chunk->key, "Chunk key, 32 hex digits")->required();
  cmd->add_option("FILE", put_chunk->file,
                  "Raw KV: layers x layer slice bytes, layer-major; - for stdin")
      ->required();

  auto get_layers = std::make_shared<GetLayersFlags>();
  cmd = AddCommand(kv, "get-layers",
                   "Write layers A:B of the listed chunks, layer-major (each layer: every chunk's "
                   "slice in list order), checking every slice",
                   get_layers, GetLayers);
  AddStoreFlag(cmd, &get_layers->store);
  AddLayoutFlags(cmd, &get_layers->layout);
  cmd->add_option("--keys", get_layers->keys_file,
                  "File of chunk keys, one hex key a line; - for stdin")
      ->required();
  cmd->add_option("--layers", get_layers->layers, "Layer range A:B (A inclusive, B exclusive)")
      ->required();
  cmd->add_option("--out,-o", get_layers->out,
                  "Output file (written whole or not at all); - for stdout, where a damaged "
                  "chunk found mid-way ends the output early with an error");

  auto keys = std::make_shared<KeysFlags>();
  cmd = AddCommand(kv, "keys",
                   "Print the chunk keys of a token sequence, one hex key a line (docs/keys.md)",
                   keys, Keys);
  AddLayoutFlags(cmd, &keys->layout);
  cmd->add_option("--tenant", keys->tenant, "Tenant salt folded into the namespace");
  cmd->add_option("--adapter", keys->adapter, "LoRA adapter name folded into the namespace");
  cmd->add_option("--cache-salt", keys->cache_salt, "Request cache salt folded into the namespace");
  cmd->add_option("--tokens", keys->tokens_file,
                  "File of token ids (whitespace or comma separated)");
  cmd->add_option("TOKEN", keys->tokens, "Token ids");
  cmd->add_flag("--namespace", keys->show_namespace,
                "Print the namespace id first, as 'namespace HEX'");
}

}  // namespace objectcache::cli
