#include "cli/kv_command.h"

#include <charconv>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/cli_support.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/layer_reader.h"

namespace objectcache::cli {
namespace {

// Token ids separated by whitespace or commas.
Result<std::vector<uint32_t>> ParseTokens(std::string_view text) {
  std::vector<uint32_t> tokens;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',') {
      ++i;
      continue;
    }
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc() || end == text.data() + i) {
      return InvalidArgumentError("token " + std::to_string(tokens.size()) + " ('" +
                                  std::string(text.substr(i, 12)) +
                                  "') is not an integer in 0..4294967295");
    }
    tokens.push_back(v);
    i = static_cast<size_t>(end - text.data());
  }
  return tokens;
}

void AddPut(CLI::App* kv) {
  auto* cmd = kv->add_subcommand("put", "Store FILE (- for stdin) as object KEY");
  auto store = std::make_shared<std::string>();
  auto key = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  AddStoreFlag(cmd, store.get());
  cmd->add_option("KEY", *key, "Object name (1 to 1024 bytes)")->required();
  cmd->add_option("FILE", *file, "File to store, - for stdin")->required();
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_RETURN_IF_ERROR(ValidateKey(*key));
      OC_ASSIGN_OR_RETURN(std::string value, ReadFile(*file));
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      return s->Put(*key, AsBytes(value)).Annotate("storing " + *key);
    });
  });
}

void AddGet(CLI::App* kv) {
  auto* cmd = kv->add_subcommand("get", "Write object KEY to stdout or --out FILE");
  auto store = std::make_shared<std::string>();
  auto key = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>("-");
  AddStoreFlag(cmd, store.get());
  cmd->add_option("KEY", *key, "Object name")->required();
  cmd->add_option("--out,-o", *out, "Output file (written whole or not at all); - for stdout");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      Result<std::string> value = ReadWholeObject(*s, *key);
      if (!value.has_value()) return value.error();
      return WriteFileAtomically(*out, *value);
    });
  });
}

void AddExist(CLI::App* kv) {
  auto* cmd = kv->add_subcommand(
      "exist", "Print 'present KEY' or 'absent KEY' for each key; exit 3 if any is absent");
  auto store = std::make_shared<std::string>();
  auto keys = std::make_shared<std::vector<std::string>>();
  auto prefix_count = std::make_shared<bool>(false);
  AddStoreFlag(cmd, store.get());
  cmd->add_option("KEY", *keys, "Object names, in order")->required();
  cmd->add_flag("--prefix-count", *prefix_count,
                "Print only how many leading keys exist (the cached prefix length)");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      for (const std::string& k : *keys) OC_RETURN_IF_ERROR(ValidateKey(k));
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      if (*prefix_count) {
        OC_ASSIGN_OR_RETURN(size_t n, s->CountPresentPrefix(*keys));
        std::cout << n << "\n";
        if (n < keys->size()) ExitCode() = kExitAbsent;
        return Status();
      }
      OC_ASSIGN_OR_RETURN(std::vector<bool> present, s->Exist(*keys));
      for (size_t i = 0; i < keys->size(); ++i) {
        std::cout << (present[i] ? "present " : "absent ") << (*keys)[i] << "\n";
        if (!present[i]) ExitCode() = kExitAbsent;
      }
      return Status();
    });
  });
}

void AddRm(CLI::App* kv) {
  auto* cmd = kv->add_subcommand("rm", "Delete objects");
  auto store = std::make_shared<std::string>();
  auto keys = std::make_shared<std::vector<std::string>>();
  auto force = std::make_shared<bool>(false);
  AddStoreFlag(cmd, store.get());
  cmd->add_option("KEY", *keys, "Object names")->required();
  cmd->add_flag("--force,-f", *force, "A missing object is not an error");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      for (const std::string& k : *keys) OC_RETURN_IF_ERROR(ValidateKey(k));
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      for (const std::string& k : *keys) {
        Status st = s->Delete(k);
        if (st.code() == StatusCode::kNotFound && *force) continue;
        OC_RETURN_IF_ERROR(st);
      }
      return Status();
    });
  });
}

void AddLs(CLI::App* kv) {
  auto* cmd = kv->add_subcommand("ls", "List object names in byte order");
  auto store = std::make_shared<std::string>();
  auto prefix = std::make_shared<std::string>();
  auto lng = std::make_shared<bool>(false);
  AddStoreFlag(cmd, store.get());
  cmd->add_option("--prefix", *prefix, "Only names starting with this");
  cmd->add_flag("--long,-l", *lng, "Print SIZE<tab>NAME");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      ListOptions options{.prefix = *prefix, .start_after = "", .max_keys = 1000};
      for (;;) {
        OC_ASSIGN_OR_RETURN(ListPage page, s->List(options));
        for (const ObjectInfo& o : page.objects) {
          if (*lng) std::cout << o.size << "\t";
          std::cout << o.key << "\n";
        }
        if (!page.truncated) break;
        options.start_after = page.objects.back().key;
      }
      return Status();
    });
  });
}

void AddPutChunk(CLI::App* kv) {
  auto* cmd = kv->add_subcommand(
      "put-chunk", "Store one chunk's raw layer-major KV from FILE as a chunk object");
  auto store = std::make_shared<std::string>();
  auto layout = std::make_shared<LayoutFlags>();
  auto key = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  AddStoreFlag(cmd, store.get());
  AddLayoutFlags(cmd, layout.get());
  cmd->add_option("--key", *key, "Chunk key, 32 hex digits")->required();
  cmd->add_option("FILE", *file, "Raw KV: layers x layer slice bytes, layer-major; - for stdin")
      ->required();
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(*layout));
      OC_ASSIGN_OR_RETURN(ChunkKey k, ChunkKey::FromHex(*key));
      OC_ASSIGN_OR_RETURN(std::string kv_bytes, ReadFile(*file));
      if (kv_bytes.size() != m.layout.ChunkKvBytes()) {
        return InvalidArgumentError(*file + " is " + std::to_string(kv_bytes.size()) +
                                    " bytes; a chunk of " + m.layout.ToString() + " is " +
                                    std::to_string(m.layout.ChunkKvBytes()));
      }
      OC_ASSIGN_OR_RETURN(std::string object, EncodeChunkObject(m.layout, k, AsBytes(kv_bytes)));
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      return s->Put(k.ToHex(), AsBytes(object)).Annotate("storing chunk " + k.ToHex());
    });
  });
}

void AddGetLayers(CLI::App* kv) {
  auto* cmd = kv->add_subcommand(
      "get-layers",
      "Write layers A:B of the listed chunks, layer-major (each layer: every chunk's slice in "
      "list order), checking every slice");
  auto store = std::make_shared<std::string>();
  auto layout = std::make_shared<LayoutFlags>();
  auto keys_file = std::make_shared<std::string>();
  auto layers = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>("-");
  AddStoreFlag(cmd, store.get());
  AddLayoutFlags(cmd, layout.get());
  cmd->add_option("--keys", *keys_file, "File of chunk keys, one hex key a line; - for stdin")
      ->required();
  cmd->add_option("--layers", *layers, "Layer range A:B (A inclusive, B exclusive)")->required();
  cmd->add_option("--out,-o", *out,
                  "Output file (written whole or not at all); - for stdout, where a damaged "
                  "chunk found mid-way ends the output early with an error");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(*layout));
      OC_ASSIGN_OR_RETURN(LayerRange range, LayerRange::Parse(*layers, m.layout.num_layers));
      OC_ASSIGN_OR_RETURN(std::string text, ReadFile(*keys_file));
      OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> keys, ParseKeyList(text, *keys_file));
      OC_ASSIGN_OR_RETURN(auto s, OpenStoreFlag(*store));
      OC_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> output, OutputFile::Open(*out));
      OC_RETURN_IF_ERROR(ReadLayersLayerMajor(
          *s, m.layout, keys, range,
          [&](uint32_t, std::span<const std::byte> bytes) { return output->Write(bytes); }));
      return output->Commit();
    });
  });
}

void AddKeys(CLI::App* kv) {
  auto* cmd = kv->add_subcommand(
      "keys", "Print the chunk keys of a token sequence, one hex key a line (docs/keys.md)");
  auto layout = std::make_shared<LayoutFlags>();
  auto tenant = std::make_shared<std::string>();
  auto adapter = std::make_shared<std::string>();
  auto cache_salt = std::make_shared<std::string>();
  auto tokens_file = std::make_shared<std::string>();
  auto tokens = std::make_shared<std::vector<std::string>>();
  auto show_ns = std::make_shared<bool>(false);
  AddLayoutFlags(cmd, layout.get());
  cmd->add_option("--tenant", *tenant, "Tenant salt folded into the namespace");
  cmd->add_option("--adapter", *adapter, "LoRA adapter name folded into the namespace");
  cmd->add_option("--cache-salt", *cache_salt, "Request cache salt folded into the namespace");
  cmd->add_option("--tokens", *tokens_file, "File of token ids (whitespace or comma separated)");
  cmd->add_option("TOKEN", *tokens, "Token ids");
  cmd->add_flag("--namespace", *show_ns, "Print the namespace id first, as 'namespace HEX'");
  cmd->callback([=] {
    RunCommand([&]() -> Status {
      OC_ASSIGN_OR_RETURN(ModelPreset m, ResolveLayoutFlags(*layout));
      std::string text;
      if (!tokens_file->empty()) {
        OC_ASSIGN_OR_RETURN(text, ReadFile(*tokens_file));
      }
      for (const std::string& t : *tokens) text += " " + t;
      OC_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, ParseTokens(text));
      KeyNamespace ns(
          m.name, m.layout,
          KeyScope{.tenant_salt = *tenant, .adapter = *adapter, .cache_salt = *cache_salt});
      if (*show_ns) std::cout << "namespace " << ChunkKey(ns.id()).ToHex() << "\n";
      for (const ChunkKey& k : ns.KeysForTokens(ids)) std::cout << k.ToHex() << "\n";
      return Status();
    });
  });
}

}  // namespace

void AddKvCommands(CLI::App* app) {
  CLI::App* kv = app->add_subcommand("kv", "Store and retrieve objects and chunks");
  kv->require_subcommand(1);
  AddPut(kv);
  AddGet(kv);
  AddExist(kv);
  AddRm(kv);
  AddLs(kv);
  AddPutChunk(kv);
  AddGetLayers(kv);
  AddKeys(kv);
}

}  // namespace objectcache::cli
