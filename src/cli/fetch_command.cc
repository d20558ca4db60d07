#include "cli/fetch_command.h"

#include <iostream>
#include <sstream>

#include "cli/cli_support.h"
#include "client/layer_stream.h"
#include "objectcache/chunk_key.h"
#include "objectcache/client.h"
#include "objectcache/layer_reader.h"
#include "s3/s3_connection.h"
#include "wire/layerwise_request.h"

namespace objectcache::cli {
namespace {

struct FetchFlags {
  std::string endpoint = "http://127.0.0.1:9000";
  std::string bucket;
  LayoutFlags layout;
  std::string keys_file;
  std::string layers;
  std::string out = "-";
  std::string ca_file;
  int wire_version = 2;
};

Status RunFetch(const FetchFlags& f) {
  OC_ASSIGN_OR_RETURN(s3::S3Endpoint endpoint, s3::S3Endpoint::Parse(f.endpoint));
  endpoint.ca_file = f.ca_file;
  OC_ASSIGN_OR_RETURN(ModelPreset model, ResolveLayoutFlags(f.layout));
  OC_ASSIGN_OR_RETURN(LayerRange range, LayerRange::Parse(f.layers, model.layout.num_layers));
  OC_ASSIGN_OR_RETURN(std::string text, ReadFile(f.keys_file));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> chunk_keys, ParseKeyList(text, f.keys_file));
  const std::string request =
      wire::EncodeLayerwiseRequest({.version = static_cast<uint16_t>(f.wire_version),
                                    .keys = chunk_keys,
                                    .first = range.first,
                                    .last = range.last,
                                    .model = model});

  OC_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(f.out));
  // One region serves every layer: a layer is written out as soon as it is verified, before
  // the decoder fills the region with the next one.
  std::string region;
  Status write_status;
  client::LayerStreamDecoder decoder(
      [&](const client::LayerStreamHeader& h) -> Result<client::LayerPlacement> {
        // Nothing is sized from the server's word before it is checked against the request.
        if (h.first_layer != range.first || h.layer_count != range.last - range.first ||
            h.slice_bytes != model.layout.LayerSliceBytes() || h.keys != chunk_keys.size() ||
            h.hits > chunk_keys.size()) {
          return DataLossError("the layerwise response does not match the request");
        }
        region.assign(h.hits * h.slice_bytes, '\0');
        return client::LayerPlacement{
            .regions = std::vector<std::span<std::byte>>(h.layer_count, AsWritableBytes(region)),
            .chunk_name = [&](uint64_t j) { return chunk_keys[j].ToHex(); }};
      },
      [&](uint32_t, const Status& s) {
        if (s.ok() && write_status.ok()) write_status = out->Write(AsBytes(region));
      });
  s3::S3Connection conn(endpoint, s3::S3Credentials::FromEnvironment());
  OC_ASSIGN_OR_RETURN(s3::S3Response res, conn.Send("POST", "/" + f.bucket, {{"layerwise", ""}},
                                                    request, [&](std::span<const std::byte> bytes) {
                                                      return decoder.Feed(bytes);
                                                    }));
  if (res.status != 200) {
    return UnavailableError("server answered " + std::to_string(res.status) + ": " +
                            res.error_body);
  }
  OC_RETURN_IF_ERROR(decoder.Finish());
  OC_RETURN_IF_ERROR(write_status);
  std::cerr << "fetched layers " << range.first << ":" << range.last << " of "
            << decoder.header().hits << " of " << chunk_keys.size()
            << " chunks (the cached prefix)\n";
  return out->Commit();
}

struct PinFlags {
  std::string endpoint = "http://127.0.0.1:9000";
  std::string ca_file;
  std::string bucket;
  std::string keys_file;
  uint64_t ttl_seconds = 3600;
};

Status RunPin(const PinFlags& f) {
  OC_ASSIGN_OR_RETURN(std::string text, ReadFile(f.keys_file));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> keys, ParseKeyList(text, f.keys_file));
  ClientOptions options;
  options.endpoints = {f.endpoint};
  options.bucket = f.bucket;
  options.ca_file = f.ca_file;
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(options));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> missing,
                      client->Pin(keys, std::chrono::seconds(f.ttl_seconds)));
  std::cerr << "pinned " << keys.size() - missing.size() << " of " << keys.size() << " chunks for "
            << f.ttl_seconds << " s\n";
  if (missing.empty()) return Status();
  std::string list;
  for (const ChunkKey& k : missing) list += "\n  " + k.ToHex();
  return NotFoundError(std::to_string(missing.size()) + " of the keys are not cached:" + list);
}

void AddEndpointFlags(CLI::App* cmd, std::string* endpoint, std::string* ca_file) {
  cmd->add_option("--endpoint", *endpoint, "Server URL (http:// or https://)")
      ->capture_default_str();
  cmd->add_option("--ca-file", *ca_file,
                  "PEM bundle of the CAs an https:// server's certificate is checked against "
                  "(default: the system's)");
}

}  // namespace

void AddPinCommand(CLI::App* app) {
  auto f = std::make_shared<PinFlags>();
  CLI::App* cmd = app->add_subcommand(
      "pin",
      "Pin chunks against eviction for a time (a system prompt or a document many requests "
      "share); says which keys are not cached (credentials as for fetch)");
  AddEndpointFlags(cmd, &f->endpoint, &f->ca_file);
  cmd->add_option("--bucket", f->bucket, "Bucket")->required();
  cmd->add_option("--keys", f->keys_file, "File of chunk keys, one hex key a line")->required();
  cmd->add_option("--ttl", f->ttl_seconds, "Seconds the pin lasts (at most a year)")
      ->capture_default_str();
  cmd->callback([f] { RunCommand([&] { return RunPin(*f); }); });
}

void AddFetchCommand(CLI::App* app) {
  auto f = std::make_shared<FetchFlags>();
  CLI::App* cmd = app->add_subcommand(
      "fetch",
      "Aggregated layerwise retrieval: the cached prefix of the listed chunks, layers A:B, "
      "layer-major, every frame checked (credentials from OBJECTCACHE_ACCESS_KEY/"
      "OBJECTCACHE_SECRET_KEY or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)");
  AddEndpointFlags(cmd, &f->endpoint, &f->ca_file);
  cmd->add_option("--bucket", f->bucket, "Bucket")->required();
  AddLayoutFlags(cmd, &f->layout);
  cmd->add_option("--keys", f->keys_file, "File of chunk keys, one hex key a line")->required();
  cmd->add_option("--layers", f->layers, "Layer range A:B (A inclusive, B exclusive)")->required();
  cmd->add_option("--out,-o", f->out, "Output file (written whole or not at all); - for stdout");
  cmd->add_option("--wire-version", f->wire_version,
                  "Layerwise wire format: 2 (the writers' checksums, checked here) or 1")
      ->check(CLI::IsMember({1, 2}));
  cmd->callback([f] { RunCommand([&] { return RunFetch(*f); }); });
}

}  // namespace objectcache::cli
