#include "objectcache/client.h"

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "client/connection_pool.h"
#include "client/layer_stream.h"
#include "client/s3_connection.h"

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
  Status Run(ConnectionPool* pool, size_t endpoint, const std::string& bucket) {
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
          {
            std::lock_guard lock(mu_);
            hits_ = h.hits;
          }
          cv_.notify_all();
          return request_.regions;
        },
        [&](uint32_t layer, const Status& s) {
          {
            std::lock_guard lock(mu_);
            status_[layer - request_.layers.first] = s;
          }
          cv_.notify_all();
          if (request_.on_layer) request_.on_layer(layer, s);
        });
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
  ClientImpl(std::unique_ptr<ConnectionPool> pool, std::string bucket)
      : pool_(std::move(pool)), bucket_(std::move(bucket)) {}

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

  std::unique_ptr<ConnectionPool> pool_;
  const std::string bucket_;
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
                     options.bucket));
}

}  // namespace objectcache
