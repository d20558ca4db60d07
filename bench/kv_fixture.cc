#include "bench/kv_fixture.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <utility>

#include "objectcache/chunk_object.h"
#include "objectcache/store.h"
#include "s3/s3_connection.h"

namespace objectcache::bench {
namespace {

namespace fs = std::filesystem;

// Deterministic KV bytes (xorshift64*).
void FillKv(std::string* kv, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t j = 0; j + 8 <= kv->size(); j += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const uint64_t v = x * 0x2545f4914f6cdd1dull;
    std::memcpy(kv->data() + j, &v, 8);
  }
}

}  // namespace

std::vector<PageBuffer> MakeRegions(uint32_t layers, size_t bytes, size_t offset) {
  std::vector<PageBuffer> out;
  out.reserve(layers);
  for (uint32_t l = 0; l < layers; ++l) out.emplace_back(bytes, offset);
  return out;
}

Status PrefixSet::Check(size_t chunks) const { return CheckRegions(regions, chunks); }

Status PrefixSet::CheckRegions(std::span<const PageBuffer> into, size_t chunks) const {
  const uint64_t slice = model.layout.LayerSliceBytes();
  const uint32_t layers = model.layout.num_layers;
  for (size_t l = 0; l < into.size(); ++l) {
    for (size_t c = 0; c < chunks; ++c) {
      if (LayerChecksum(into[l].bytes().subspan(c * slice, slice)) !=
          checksums[(c % keys.size()) * layers + l]) {
        return DataLossError("layer " + std::to_string(l) + " of chunk " + std::to_string(c) +
                             " differs from what was stored");
      }
    }
  }
  return Status();
}

void PrefixSet::AllocateRegions(size_t chunks) {
  regions =
      MakeRegions(model.layout.num_layers, chunks * model.layout.LayerSliceBytes(), region_offset);
}

void PrefixSet::ClearRegions(size_t chunks) {
  for (PageBuffer& r : regions) std::memset(r.data(), 0, chunks * model.layout.LayerSliceBytes());
}

LayerwiseRequest PrefixSet::Request(size_t chunks) {
  LayerwiseRequest req{.model = model,
                       .keys = {keys.begin(), keys.begin() + static_cast<long>(chunks)},
                       .layers = {0, model.layout.num_layers}};
  for (PageBuffer& r : regions) req.regions.push_back(r.bytes());
  return req;
}

Result<std::unique_ptr<LayerwiseRetrieval>> PrefixSet::StartRetrieval(Client* client,
                                                                      RetrievalMode mode,
                                                                      size_t chunks) {
  LayerwiseRequest req = Request(chunks);
  req.mode = mode;
  return client->RetrieveLayerwise(std::move(req));
}

Status PrefixSet::CheckRetrieved(LayerwiseRetrieval& retrieval, size_t chunks) const {
  OC_ASSIGN_OR_RETURN(uint32_t hits, retrieval.Hits());
  if (hits != chunks) {
    return DataLossError("expected " + std::to_string(chunks) + " hits, got " +
                         std::to_string(hits));
  }
  return Check(chunks);
}

ChunkSink ClientSink(Client* writer) {
  auto before = std::make_shared<ClientStats>(writer->Stats());
  auto queued = std::make_shared<size_t>(0);
  return {.put =
              [=](const ChunkKey& key, std::string object) {
                writer->StoreAsync(key, std::move(object));
                if (++*queued % 128 == 0) writer->Flush();  // bounded memory: nothing dropped
                return Status();
              },
          .finish =
              [=] {
                writer->Flush();
                const ClientStats st = writer->Stats();
                const uint64_t failed = st.failed - before->failed,
                               dropped = st.dropped - before->dropped;
                if (failed + dropped > 0 || st.stored - before->stored < *queued) {
                  return InternalError("storing the prefix failed: " + std::to_string(failed) +
                                       " failed, " + std::to_string(dropped) + " dropped");
                }
                return Status();
              }};
}

ChunkSink StoreSink(Store* store) {
  return {.put = [store](const ChunkKey& key,
                         std::string object) { return store->Put(key.ToHex(), AsBytes(object)); },
          .finish = [] { return Status(); }};
}

Result<PrefixSet> StorePrefix(const ModelPreset& model, size_t chunks, uint64_t seed,
                              const std::vector<ChunkSink>& sinks) {
  PrefixSet p;
  p.model = model;
  const KvLayout& layout = model.layout;
  std::vector<uint32_t> tokens(chunks * layout.tokens_per_chunk);
  uint64_t x = seed;
  for (uint32_t& t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint32_t>((x >> 33) % 128256);
  }
  p.keys = KeyNamespace(model.name, layout).KeysForTokens(tokens);
  const uint64_t slice = layout.LayerSliceBytes();
  std::string kv(layout.ChunkKvBytes(), '\0');
  for (size_t c = 0; c < p.keys.size(); ++c) {
    FillKv(&kv, seed ^ (c + 1));
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      p.checksums.push_back(LayerChecksum(AsBytes(kv).subspan(l * slice, slice)));
    }
    OC_ASSIGN_OR_RETURN(std::string object, EncodeChunkObject(layout, p.keys[c], AsBytes(kv)));
    for (const ChunkSink& sink : sinks) OC_RETURN_IF_ERROR(sink.put(p.keys[c], object));
  }
  for (const ChunkSink& sink : sinks) OC_RETURN_IF_ERROR(sink.finish());
  p.AllocateRegions(chunks);
  return p;
}

Result<PrefixSet> StorePrefix(const ModelPreset& model, size_t chunks, uint64_t seed,
                              Client* writer) {
  return StorePrefix(model, chunks, seed, {ClientSink(writer)});
}

// DIR/env as written by scripts/ceph-dev: NAME=VALUE lines, values maybe single-quoted.
Result<std::map<std::string, std::string>> ReadCephEnv(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "env");
  if (!in) {
    return NotFoundError("no cluster settings in " + dir +
                         "/env: start one with scripts/ceph-dev start " + dir);
  }
  std::map<std::string, std::string> env;
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') {
      value = value.substr(1, value.size() - 2);
    }
    env[line.substr(0, eq)] = value;
  }
  for (const char* key : {"RADOS_URI", "RGW_ENDPOINT", "RGW_ACCESS_KEY", "RGW_SECRET_KEY"}) {
    if (!env.contains(key)) return InvalidArgumentError(dir + "/env lacks " + key);
  }
  return env;
}

Status CreateBucket(const std::string& endpoint, const std::string& bucket,
                    const ModelPreset* model) {
  OC_ASSIGN_OR_RETURN(s3::S3Endpoint ep, s3::S3Endpoint::Parse(endpoint));
  s3::S3Connection conn(ep, s3::S3Credentials::FromEnvironment());
  std::vector<std::pair<std::string, std::string>> headers;
  if (model != nullptr) headers.emplace_back("x-objectcache-kv-layout", ModelToJson(*model));
  OC_ASSIGN_OR_RETURN(s3::S3Response res,
                      conn.Send(
                          "PUT", "/" + bucket, {}, "", [](auto) { return Status(); }, headers));
  if (res.status == 200 || res.status == 409) return Status();  // 409: it is there already
  return UnavailableError("creating bucket " + bucket + " failed: " + res.error_body);
}

Status CreateBucket(const std::string& endpoint, const std::string& bucket,
                    const ModelPreset& model) {
  return CreateBucket(endpoint, bucket, &model);
}

Result<ServerChild> StartServer(const fs::path& dir, bool fresh,
                                const std::vector<std::string>& extra) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (fresh) fs::remove_all(dir / "store", ec);
  fs::remove(dir / "port", ec);
  std::vector<std::string> argv = {fs::read_symlink("/proc/self/exe").string(),
                                   "serve",
                                   "--anonymous",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--port-file",
                                   (dir / "port").string(),
                                   "--log-level",
                                   "error"};
  if (std::find(extra.begin(), extra.end(), "--store") == extra.end()) {
    argv.insert(argv.end(), {"--store", (dir / "store").string()});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  ServerChild s;
  s.process = std::make_unique<ChildProcess>(argv, (dir / "serve.log").string());
  // The server writes its port once it listens.
  uint16_t port = 0;
  for (int i = 0; i < 1200 && port == 0 && s.process->Running(); ++i) {
    std::ifstream(dir / "port") >> port;
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (port == 0) {
    return UnavailableError("objectcache serve did not start (see " + (dir / "serve.log").string() +
                            ")");
  }
  s.port = port;
  s.endpoint = "http://127.0.0.1:" + std::to_string(port);
  return s;
}

Result<ScratchRoot> ScratchRoot::Make(const std::string& dir, std::string_view name) {
  std::error_code ec;
  if (!dir.empty()) {
    const std::filesystem::path path = std::filesystem::absolute(dir);
    std::filesystem::create_directories(path, ec);
    if (ec) return InvalidArgumentError("--dir " + dir + ": " + ec.message());
    return ScratchRoot(path, /*temporary=*/false);
  }
  return MakeIn(std::filesystem::temp_directory_path(ec), name);
}

Result<ScratchRoot> ScratchRoot::MakeIn(const std::filesystem::path& parent,
                                        std::string_view name) {
  std::string tmpl = (parent / (std::string(name) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoError("making a scratch directory", errno);
  return ScratchRoot(tmpl, /*temporary=*/true);
}

Result<std::filesystem::path> ScratchRoot::FreshSubdir(std::string_view name) const {
  const std::filesystem::path dir = path_ / name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!ec) std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoError("making " + dir.string() + " anew", ec.value());
  return dir;
}

ScratchRoot::ScratchRoot(ScratchRoot&& other) noexcept
    : path_(std::move(other.path_)), temporary_(std::exchange(other.temporary_, false)) {}

ScratchRoot::~ScratchRoot() {
  if (!temporary_) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace objectcache::bench
