#include "objectcache/client.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "client/connection_pool.h"
#include "client/layer_stream.h"
#include "client/s3_connection.h"
#include "core/byte_order.h"
#include "objectcache/chunk_object.h"
#include "objectcache/store.h"

namespace objectcache {
namespace {

using client::ConnectionPool;
using client::LayerStreamDecoder;
using client::LayerStreamHeader;
using client::S3Connection;
using client::S3Credentials;
using client::S3Endpoint;

class Retrieval final : public LayerwiseRetrieval {
 public:
  explicit Retrieval(LayerwiseRequest request) : request_(std::move(request)) {
    status_.resize(request_.layers.last - request_.layers.first);
  }
  ~Retrieval() override {
    if (thread_.joinable()) thread_.join();
  }

  void Start(ConnectionPool* pool, size_t endpoint, std::string bucket) {
    thread_ = std::thread([this, pool, endpoint, bucket = std::move(bucket)] {
      Finish(Run(pool, endpoint, bucket));
    });
  }

  Result<uint32_t> Hits() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return hits_.has_value() || done_; });
    if (hits_) return *hits_;
    return final_;
  }

  Status WaitForLayer(uint32_t layer) override {
    if (layer < request_.layers.first || layer >= request_.layers.last) {
      return InvalidArgumentError("layer " + std::to_string(layer) + " is not in the request");
    }
    const size_t i = layer - request_.layers.first;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return status_[i].has_value() || done_; });
    if (status_[i]) return *status_[i];
    return final_.ok() ? InternalError("retrieval ended without layer " + std::to_string(layer))
                       : final_;
  }

  Status Wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return final_;
  }

 private:
  void SetHits(uint32_t hits) {
    {
      std::lock_guard lock(mu_);
      hits_ = hits;
    }
    cv_.notify_all();
  }

  void LayerDone(uint32_t layer, const Status& s) {
    {
      std::lock_guard lock(mu_);
      status_[layer - request_.layers.first] = s;
    }
    cv_.notify_all();
    if (request_.on_layer) request_.on_layer(layer, s);
  }

  Status Run(ConnectionPool* pool, size_t endpoint, const std::string& bucket) {
    if (request_.mode == RetrievalMode::kPlainLayerwise) return RunPlain(pool, endpoint, bucket);
    nlohmann::json body;
    body["version"] = 1;
    nlohmann::json keys = nlohmann::json::array();
    for (const ChunkKey& k : request_.keys) keys.push_back(k.ToHex());
    body["keys"] = keys;
    body["layers"] = {request_.layers.first, request_.layers.last};
    body["layout"] = nlohmann::json::parse(ModelToJson(request_.model));
    LayerStreamDecoder decoder(
        [&](const LayerStreamHeader& h) -> Result<std::vector<std::span<std::byte>>> {
          if (h.first_layer != request_.layers.first ||
              h.layer_count != request_.layers.last - request_.layers.first ||
              h.slice_bytes != request_.model.layout.LayerSliceBytes()) {
            return DataLossError("layerwise response does not match the request");
          }
          SetHits(h.hits);
          return request_.regions;
        },
        [&](uint32_t layer, const Status& s) { LayerDone(layer, s); });
    std::unique_ptr<S3Connection> conn = pool->Take(endpoint);
    Result<client::S3Response> res =
        conn->Send("POST", "/" + bucket, {{"layerwise", ""}}, body.dump(),
                   [&](std::span<const std::byte> bytes) { return decoder.Feed(bytes); });
    if (!res) return res.error();
    if (res->status != 200) {
      return UnavailableError("layerwise retrieval: server answered " +
                              std::to_string(res->status) + ": " + res->error_body);
    }
    OC_RETURN_IF_ERROR(decoder.Finish());
    pool->Return(endpoint, std::move(conn));
    return Status();
  }

  // A ranged GET of [offset, offset + dest.size()) of one object into dest.
  static Status GetRange(S3Connection& conn, const std::string& path, uint64_t offset,
                         std::span<std::byte> dest, unsigned* status) {
    size_t got = 0;
    OC_ASSIGN_OR_RETURN(client::S3Response res,
                        conn.Send("GET", path, {}, "",
                                  [&](std::span<const std::byte> b) {
                                    if (got + b.size() > dest.size())
                                      return DataLossError("range reply too long");
                                    std::memcpy(dest.data() + got, b.data(), b.size());
                                    got += b.size();
                                    return Status();
                                  },
                                  {{"Range", "bytes=" + std::to_string(offset) + "-" +
                                                 std::to_string(offset + dest.size() - 1)}}));
    *status = res.status;
    if (res.status == 206 && got == dest.size()) return Status();
    if (res.status == 404) return NotFoundError(path + ": no such object");
    return UnavailableError(path + ": ranged GET answered " + std::to_string(res.status));
  }

  Status RunPlain(ConnectionPool* pool, size_t endpoint, const std::string& bucket) {
    const KvLayout& layout = request_.model.layout;
    std::unique_ptr<S3Connection> conn = pool->Take(endpoint);
    // The hit prefix: headers of the leading chunks that exist.
    std::vector<ChunkHeader> headers;
    std::string header(kChunkHeaderRegion, '\0');
    for (const ChunkKey& key : request_.keys) {
      unsigned status = 0;
      Status s =
          GetRange(*conn, "/" + bucket + "/" + key.ToHex(), 0, AsWritableBytes(header), &status);
      if (status == 404) break;
      OC_RETURN_IF_ERROR(s);
      ChunkExpectation expect{.layout = &layout, .key = &key};
      Result<ChunkHeader> h = DecodeChunkHeader(AsBytes(header), expect);
      if (!h) break;  // a damaged or foreign header ends the prefix, as on the server
      headers.push_back(std::move(*h));
    }
    SetHits(static_cast<uint32_t>(headers.size()));
    const uint64_t slice = layout.LayerSliceBytes();
    for (uint32_t layer = request_.layers.first; layer < request_.layers.last; ++layer) {
      std::span<std::byte> region = request_.regions[layer - request_.layers.first];
      for (size_t j = 0; j < headers.size(); ++j) {
        unsigned status = 0;
        std::span<std::byte> dest = region.subspan(j * slice, slice);
        Status s = GetRange(*conn, "/" + bucket + "/" + request_.keys[j].ToHex(),
                            headers[j].LayerOffset(layer), dest, &status);
        if (s.ok()) s = VerifyLayerSlice(headers[j], layer, dest);
        if (!s.ok()) {
          LayerDone(layer, s);
          return s;
        }
      }
      LayerDone(layer, Status());
    }
    pool->Return(endpoint, std::move(conn));
    return Status();
  }

  void Finish(Status s) {
    {
      std::lock_guard lock(mu_);
      final_ = std::move(s);
      done_ = true;
      // Layers never reached are reported to the callback as failed, so nobody waits forever.
      for (size_t i = 0; i < status_.size(); ++i) {
        if (!status_[i] && !final_.ok()) {
          status_[i] = final_;
          if (request_.on_layer)
            request_.on_layer(request_.layers.first + static_cast<uint32_t>(i), final_);
          break;  // later layers: "no later layer follows"
        }
      }
    }
    cv_.notify_all();
  }

  const LayerwiseRequest request_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<uint32_t> hits_;               // guarded by mu_
  std::vector<std::optional<Status>> status_;  // guarded by mu_, per layer of the range
  bool done_ = false;                          // guarded by mu_
  Status final_;                               // guarded by mu_
};

class ClientImpl final : public Client {
 public:
  ClientImpl(std::unique_ptr<ConnectionPool> pool, std::string bucket, size_t write_behind_bytes)
      : pool_(std::move(pool)),
        bucket_(std::move(bucket)),
        queue_limit_(write_behind_bytes),
        writer_([this] { WriteBehindLoop(); }) {}

  ~ClientImpl() override {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    writer_.join();  // drains what is queued first
  }

  void StoreAsync(const ChunkKey& key, std::string chunk_object) override {
    {
      std::lock_guard lock(queue_mu_);
      if (queued_bytes_ + chunk_object.size() > queue_limit_ || stopping_) {
        stats_.dropped++;
        return;
      }
      queued_bytes_ += chunk_object.size();
      queue_.emplace_back(key.ToHex(), std::move(chunk_object));
      enqueued_++;
    }
    queue_cv_.notify_all();
  }

  void Flush() override {
    std::unique_lock lock(queue_mu_);
    const uint64_t target = enqueued_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
  }

  ClientStats Stats() const override {
    std::lock_guard lock(queue_mu_);
    return stats_;
  }

  Result<size_t> Lookup(std::span<const ChunkKey> keys) override {
    if (keys.empty()) return size_t{0};
    nlohmann::json body;
    nlohmann::json list = nlohmann::json::array();
    for (const ChunkKey& k : keys) list.push_back(k.ToHex());
    body["keys"] = list;
    const size_t endpoint = EndpointFor(keys[0]);
    std::unique_ptr<client::S3Connection> conn = pool_->Take(endpoint);
    std::string reply;
    OC_ASSIGN_OR_RETURN(client::S3Response res,
                        conn->Send("POST", "/" + bucket_, {{"lookup", ""}}, body.dump(),
                                   [&](std::span<const std::byte> b) {
                                     reply.append(reinterpret_cast<const char*>(b.data()),
                                                  b.size());
                                     return Status();
                                   }));
    pool_->Return(endpoint, std::move(conn));
    if (res.status != 200) {
      return UnavailableError("lookup: server answered " + std::to_string(res.status) + ": " +
                              res.error_body);
    }
    nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
    if (!j.is_object() || !j.contains("present_prefix") ||
        !j["present_prefix"].is_number_unsigned()) {
      return DataLossError("lookup: malformed reply");
    }
    return j["present_prefix"].get<size_t>();
  }

  Result<std::unique_ptr<LayerwiseRetrieval>> RetrieveLayerwise(LayerwiseRequest request) override {
    OC_RETURN_IF_ERROR(request.model.layout.Validate());
    const LayerRange r = request.layers;
    if (request.keys.empty()) return InvalidArgumentError("no keys");
    if (r.first >= r.last || r.last > request.model.layout.num_layers) {
      return InvalidArgumentError("layer range outside the layout");
    }
    if (request.regions.size() != r.last - r.first) {
      return InvalidArgumentError("one region per layer of the range is needed");
    }
    const uint64_t need = request.keys.size() * request.model.layout.LayerSliceBytes();
    for (const auto& region : request.regions) {
      if (region.size() < need) {
        return InvalidArgumentError("a layer region is smaller than keys x slice bytes");
      }
    }
    const size_t endpoint = EndpointFor(request.keys[0]);
    auto retrieval = std::make_unique<Retrieval>(std::move(request));
    retrieval->Start(pool_.get(), endpoint, bucket_);
    return std::unique_ptr<LayerwiseRetrieval>(std::move(retrieval));
  }

 private:
  size_t EndpointFor(const ChunkKey& key) const {
    return std::hash<ChunkKey>()(key) % pool_->endpoints();
  }

  // Sends queued chunks in batch-store requests of up to kBatchBytes / kBatchRecords.
  void WriteBehindLoop() {
    constexpr size_t kBatchBytes = 32 << 20, kBatchRecords = 256;
    for (;;) {
      std::vector<std::pair<std::string, std::string>> batch;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        size_t bytes = 0;
        while (!queue_.empty() && batch.size() < kBatchRecords &&
               (batch.empty() || bytes + queue_.front().second.size() <= kBatchBytes)) {
          bytes += queue_.front().second.size();
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        queued_bytes_ -= bytes;
      }
      const Status s = SendBatch(batch);
      {
        std::lock_guard lock(queue_mu_);
        (s.ok() ? stats_.stored : stats_.failed) += batch.size();
        finished_ += batch.size();
      }
      done_cv_.notify_all();
    }
  }

  Status SendBatch(const std::vector<std::pair<std::string, std::string>>& batch) {
    ByteWriter body;
    for (const auto& [key, object] : batch) {
      body.U32(0x5042434f);  // docs/wire-format.md, batch store
      body.U32(static_cast<uint32_t>(key.size()));
      body.Bytes(key.data(), key.size());
      body.U64(object.size());
      body.Bytes(object.data(), object.size());
    }
    body.U32(0x4542434f);
    const size_t endpoint = EndpointFor(*ChunkKey::FromHex(batch.front().first));
    std::unique_ptr<client::S3Connection> conn = pool_->Take(endpoint);
    OC_ASSIGN_OR_RETURN(client::S3Response res,
                        conn->Send("POST", "/" + bucket_, {{"batch-store", ""}}, body.str(),
                                   [](auto) { return Status(); }));
    pool_->Return(endpoint, std::move(conn));
    if (res.status != 200) {
      return UnavailableError("batch store: server answered " + std::to_string(res.status));
    }
    return Status();
  }

  std::unique_ptr<ConnectionPool> pool_;
  const std::string bucket_;
  const size_t queue_limit_;
  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_, done_cv_;
  std::deque<std::pair<std::string, std::string>> queue_;  // guarded by queue_mu_
  size_t queued_bytes_ = 0;                                // guarded by queue_mu_
  uint64_t enqueued_ = 0, finished_ = 0;                   // guarded by queue_mu_
  bool stopping_ = false;                                  // guarded by queue_mu_
  ClientStats stats_;                                      // guarded by queue_mu_
  std::thread writer_;                                     // last: starts after everything it uses
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.endpoints.empty()) return InvalidArgumentError("no endpoints");
  if (options.bucket.empty()) return InvalidArgumentError("no bucket");
  std::vector<S3Endpoint> endpoints;
  for (const std::string& url : options.endpoints) {
    OC_ASSIGN_OR_RETURN(S3Endpoint e, S3Endpoint::Parse(url));
    endpoints.push_back(std::move(e));
  }
  S3Credentials credentials = S3Credentials::FromEnvironment();
  if (!options.access_key.empty() || !options.secret_key.empty()) {
    credentials.access_key = options.access_key;
    credentials.secret_key = options.secret_key;
  }
  return std::unique_ptr<Client>(
      new ClientImpl(std::make_unique<ConnectionPool>(std::move(endpoints), std::move(credentials),
                                                      options.timeout),
                     options.bucket, options.write_behind_bytes));
}

}  // namespace objectcache
