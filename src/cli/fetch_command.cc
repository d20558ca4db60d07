#include "cli/fetch_command.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <string>

#include "cli/cli_support.h"
#include "objectcache/chunk_key.h"
#include "objectcache/client.h"
#include "objectcache/layer_reader.h"

namespace objectcache::cli {
namespace {

// What fetch and pin share: the server, the bucket and the file of chunk keys.
struct ServerFlags {
  std::string endpoint = "http://127.0.0.1:9000";
  std::string ca_file;
  std::string bucket;
  std::string keys_file;
};

ClientOptions ClientOptionsFor(const ServerFlags& s) {
  ClientOptions options;
  options.endpoints = {s.endpoint};
  options.bucket = s.bucket;
  options.ca_file = s.ca_file;
  return options;
}

Result<std::vector<ChunkKey>> ReadKeys(const ServerFlags& s) {
  OC_ASSIGN_OR_RETURN(std::string text, ReadFile(s.keys_file, kMaxKeysFileBytes));
  return ParseKeyList(text, s.keys_file);
}

void AddServerFlags(CLI::App* cmd, ServerFlags* s) {
  cmd->add_option("--endpoint", s->endpoint, "Server URL (http:// or https://)");
  cmd->add_option("--ca-file", s->ca_file,
                  "PEM bundle of the CAs an https:// server's certificate is checked against "
                  "(default: the system's)");
  cmd->add_option("--bucket", s->bucket, "Bucket")->required();
  cmd->add_option("--keys", s->keys_file, "File of chunk keys, one hex key a line")->required();
}

struct FetchFlags {
  ServerFlags server;
  LayoutFlags layout;
  std::string layers;
  std::string out = "-";
  int wire_version = 2;
};

// Where a fetch's layers land: two regions of the hit prefix's slices, each written out as
// soon as its layer is verified. The retrieval waits for a region to be written out before it
// fills it again, so memory is two layers of the prefix however many layers are fetched.
class LayerRing {
 public:
  LayerRing(uint32_t first_layer, uint64_t slice) : first_(first_layer), slice_(slice) {}

  // Chunk `chunk`'s slice of `layer` (called from the retrieval's threads): once the region
  // of two layers before it is written out. The regions are sized on the first call, by the
  // hits the retrieval knows then (the response's header has arrived).
  std::byte* Slot(uint32_t layer, size_t chunk) {
    const uint32_t i = layer - first_;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return (retrieval_ != nullptr && i < released_ + 2) || abandoned_; });
    if (regions_[0].empty()) {
      Result<uint32_t> hits = retrieval_ ? retrieval_->Hits() : Result<uint32_t>(0u);
      const uint64_t bytes = std::max<uint64_t>(hits.value_or(0), chunk + 1) * slice_;
      for (std::string& r : regions_) r.assign(bytes, '\0');
    }
    return reinterpret_cast<std::byte*>(regions_[i % 2].data()) + chunk * slice_;
  }

  void Started(LayerwiseRetrieval* retrieval) {
    std::lock_guard lock(mu_);
    retrieval_ = retrieval;
    cv_.notify_all();
  }

  // Layer `layer`'s `bytes`, once it is verified; Release gives its region back.
  std::span<const std::byte> Layer(uint32_t layer, uint64_t bytes) {
    std::lock_guard lock(mu_);
    return AsBytes(regions_[(layer - first_) % 2]).first(bytes);
  }
  void Release() {
    std::lock_guard lock(mu_);
    ++released_;
    cv_.notify_all();
  }
  // Nothing more is written out: the retrieval may fill any region until it ends.
  void Abandon() {
    std::lock_guard lock(mu_);
    abandoned_ = true;
    cv_.notify_all();
  }

 private:
  const uint32_t first_;
  const uint64_t slice_;
  std::mutex mu_;
  std::condition_variable cv_;
  LayerwiseRetrieval* retrieval_ = nullptr;
  uint32_t released_ = 0;
  bool abandoned_ = false;
  std::array<std::string, 2> regions_;
};

// Writes each layer of `range` to `out` as it becomes ready; the hits.
Result<uint32_t> WriteLayers(LayerwiseRetrieval& retrieval, LayerRing& ring, LayerRange range,
                             uint64_t slice, OutputFile& out) {
  OC_ASSIGN_OR_RETURN(uint32_t hits, retrieval.Hits());
  for (uint32_t layer = range.first; layer < range.last; ++layer) {
    OC_RETURN_IF_ERROR(retrieval.WaitForLayer(layer));
    if (hits > 0) OC_RETURN_IF_ERROR(out.Write(ring.Layer(layer, hits * slice)));
    ring.Release();
  }
  return hits;
}

// On Client, as an engine would fetch, with one aggregated request: the layers are checked
// against the request's header and the writers' checksums (v2) or the server's (v1).
Status RunFetch(const FetchFlags& f) {
  OC_ASSIGN_OR_RETURN(ModelPreset model, ResolveLayoutFlags(f.layout));
  OC_ASSIGN_OR_RETURN(LayerRange range, LayerRange::Parse(f.layers, model.layout.num_layers));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> keys, ReadKeys(f.server));
  ClientOptions options = ClientOptionsFor(f.server);
  options.wire_version = f.wire_version;
  options.aggregated_streams = 1;
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(options));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(f.out));

  const uint64_t slice = model.layout.LayerSliceBytes();
  const size_t requested = keys.size();
  LayerRing ring(range.first, slice);  // outlives the retrieval, which writes into it
  LayerwiseRequest request{.model = model, .keys = std::move(keys), .layers = range};
  request.destination = [&ring](uint32_t layer, size_t chunk) { return ring.Slot(layer, chunk); };
  request.destination_keeps_bytes = false;  // the regions are reused
  OC_ASSIGN_OR_RETURN(std::unique_ptr<LayerwiseRetrieval> retrieval,
                      client->RetrieveLayerwise(std::move(request)));
  ring.Started(retrieval.get());
  Result<uint32_t> hits = WriteLayers(*retrieval, ring, range, slice, *out);
  ring.Abandon();
  const Status ended = retrieval->Wait();
  if (!hits) return hits.error();
  OC_RETURN_IF_ERROR(ended);
  std::cerr << "fetched layers " << range.first << ":" << range.last << " of " << *hits << " of "
            << requested << " chunks (the cached prefix)\n";
  return out->Commit();
}

struct PinFlags {
  ServerFlags server;
  uint64_t ttl_seconds = 3600;
};

Status RunPin(const PinFlags& f) {
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> keys, ReadKeys(f.server));
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(ClientOptionsFor(f.server)));
  OC_ASSIGN_OR_RETURN(std::vector<ChunkKey> missing,
                      client->Pin(keys, std::chrono::seconds(f.ttl_seconds)));
  std::cerr << "pinned " << keys.size() - missing.size() << " of " << keys.size() << " chunks for "
            << f.ttl_seconds << " s\n";
  if (missing.empty()) return Status();
  std::string list;
  for (const ChunkKey& k : missing) list += "\n  " + k.ToHex();
  return NotFoundError(std::to_string(missing.size()) + " of the keys are not cached:" + list);
}

}  // namespace

void AddPinCommand(CLI::App* app) {
  auto f = std::make_shared<PinFlags>();
  CLI::App* cmd = AddCommand(
      app, "pin",
      "Pin chunks against eviction for a time (a system prompt or a document many requests "
      "share); says which keys are not cached (credentials as for fetch)",
      f, RunPin);
  AddServerFlags(cmd, &f->server);
  cmd->add_option("--ttl", f->ttl_seconds, "Seconds the pin lasts (at most a year)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{365} * 24 * 3600));
}

void AddFetchCommand(CLI::App* app) {
  auto f = std::make_shared<FetchFlags>();
  CLI::App* cmd = AddCommand(
      app, "fetch",
      "Aggregated layerwise retrieval: the cached prefix of the listed chunks, layers A:B, "
      "layer-major, every frame checked (credentials from OBJECTCACHE_ACCESS_KEY/"
      "OBJECTCACHE_SECRET_KEY or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
      f, RunFetch);
  AddServerFlags(cmd, &f->server);
  AddLayoutFlags(cmd, &f->layout);
  cmd->add_option("--layers", f->layers, "Layer range A:B (A inclusive, B exclusive)")->required();
  cmd->add_option("--out,-o", f->out, "Output file (written whole or not at all); - for stdout");
  cmd->add_option("--wire-version", f->wire_version,
                  "Layerwise wire format: 2 (the writers' checksums, checked here) or 1")
      ->check(CLI::IsMember({1, 2}));
}

}  // namespace objectcache::cli
