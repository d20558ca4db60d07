// What the TTFT and scheduler benchmarks share: prompt prefixes with deterministic KV stored
// through a client and checked byte for byte on the way back, buckets bound to a layout, and
// `objectcache serve` as a child process.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_report.h"
#include "core/page_buffer.h"
#include "objectcache/client.h"
#include "objectcache/store.h"

namespace objectcache::bench {

// A prompt's cached prefix: its keys, the XXH3-64 of every slice stored, and one region per
// layer to retrieve into.
struct PrefixSet {
  ModelPreset model;
  std::vector<ChunkKey> keys;
  std::vector<uint64_t> checksums;  // [chunk * layers + layer]
  // One per layer, room for every chunk's slice; page-aligned, as an engine's KV buffers are,
  // unless region_offset says otherwise.
  std::vector<PageBuffer> regions;
  size_t region_offset = 0;  // bytes past a page boundary where each region starts

  // DataLoss unless the first `chunks` chunks' slices in the regions are what was stored.
  Status Check(size_t chunks) const;
  // The same for the first `chunks` chunks in regions of another retrieval (one per layer from
  // layer 0, chunk i's slice at i x slice bytes), whose chunk i is stored chunk i % keys.size().
  Status CheckRegions(std::span<const PageBuffer> into, size_t chunks) const;
  // Regions with room for the first `chunks` chunks (regions.clear() frees them).
  void AllocateRegions(size_t chunks);
  // Zeroes the first `chunks` chunks' slices, so a run that misses one cannot pass Check.
  void ClearRegions(size_t chunks);
  // A retrieval of every layer of the first `chunks` chunks into the regions.
  LayerwiseRequest Request(size_t chunks);
  // Starts the retrieval of the first `chunks` chunks into the regions through `client` (clear
  // them first, outside any timing: clearing gigabytes takes a while).
  Result<std::unique_ptr<LayerwiseRetrieval>> StartRetrieval(Client* client, RetrievalMode mode,
                                                             size_t chunks);
  // After the retrieval ended OK: DataLoss unless all `chunks` were hits and every byte is what
  // was stored.
  Status CheckRetrieved(LayerwiseRetrieval& retrieval, size_t chunks) const;
};

// `layers` regions of `bytes` each, zeroed, each starting `offset` bytes past a page boundary.
std::vector<PageBuffer> MakeRegions(uint32_t layers, size_t bytes, size_t offset = 0);

// Where StorePrefix puts each chunk object: put(key, object) per chunk, then finish().
struct ChunkSink {
  std::function<Status(const ChunkKey& key, std::string object)> put;
  std::function<Status()> finish;
};
// Write-behind batch stores through a client (flushed every 128 chunks; finish fails if any
// chunk was dropped or refused).
ChunkSink ClientSink(Client* writer);
// Plain PUTs of each chunk object under its hex name (an s3:// store: any S3 server).
ChunkSink StoreSink(Store* store);

// Makes `chunks` chunks of a fresh random prompt (seeded), gives every chunk object to every
// sink, and allocates the regions.
Result<PrefixSet> StorePrefix(const ModelPreset& model, size_t chunks, uint64_t seed,
                              const std::vector<ChunkSink>& sinks);
Result<PrefixSet> StorePrefix(const ModelPreset& model, size_t chunks, uint64_t seed,
                              Client* writer);

// DIR/env as scripts/ceph-dev writes it (NAME=VALUE lines): RADOS_URI, the radosgw endpoint and
// keys; NotFound naming the command that starts a cluster when DIR has none.
Result<std::map<std::string, std::string>> ReadCephEnv(const std::string& dir);

// Creates `bucket` bound to the layout on the server at `endpoint` (existing is fine).
Status CreateBucket(const std::string& endpoint, const std::string& bucket,
                    const ModelPreset& model);
// The same for a plain bucket (any objects) when `model` is null.
Status CreateBucket(const std::string& endpoint, const std::string& bucket,
                    const ModelPreset* model);

struct ServerChild {
  std::unique_ptr<ChildProcess> process;
  uint16_t port = 0;
  std::string endpoint;  // http://127.0.0.1:PORT
};

// Starts `objectcache serve --anonymous` on the store in dir/store (removed first when
// `fresh`), with `extra` arguments (a --store there replaces dir/store); waits until it listens.
Result<ServerChild> StartServer(const std::filesystem::path& dir, bool fresh,
                                const std::vector<std::string>& extra = {});

// Where a benchmark keeps its scratch files: the directory the user named with --dir (left in
// place), or else a fresh temporary one, removed with this object, so that a run leaves
// nothing behind in the directory it was started from.
class ScratchRoot {
 public:
  // `dir` as given to --dir (empty: a temporary directory whose name starts with `name`).
  static Result<ScratchRoot> Make(const std::string& dir, std::string_view name);
  // A fresh directory inside `parent` whose name starts with `name`, removed with this object.
  static Result<ScratchRoot> MakeIn(const std::filesystem::path& parent, std::string_view name);
  ScratchRoot(ScratchRoot&& other) noexcept;
  ScratchRoot& operator=(ScratchRoot&&) = delete;
  ~ScratchRoot();

  const std::filesystem::path& path() const { return path_; }
  // path() / name, emptied of what an earlier run in a named directory left there, and created.
  Result<std::filesystem::path> FreshSubdir(std::string_view name) const;

 private:
  ScratchRoot(std::filesystem::path path, bool temporary)
      : path_(std::move(path)), temporary_(temporary) {}
  std::filesystem::path path_;
  bool temporary_;
};

}  // namespace objectcache::bench
