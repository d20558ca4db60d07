#include "client/fetcher.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_set>

#include "client/layer_stream.h"
#include "core/byte_order.h"
#include "objectcache/chunk_object.h"
#include "objectcache/store.h"
#include "wire/batch_store_wire.h"
#include "wire/layerwise_request.h"
#include "wire/lookup_wire.h"

namespace objectcache::client {
namespace {

// Runs fn(i) for i in [0, n) on up to `workers` threads; the status of each.
std::vector<Status> ParallelFor(size_t n, int workers, const std::function<Status(size_t)>& fn) {
  std::vector<Status> out(n);
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      out[i] = CallCatchingExceptions([&] { return fn(i); });  // on a thread of its own
    }
  };
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, workers)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(loop);
  loop();
  for (std::thread& t : pool) t.join();
  return out;
}

// How many leading keys of `n` exist: fetch(i) for each, `parallel` at a time in waves of
// 4 x parallel, stopping after the wave that holds the first miss (NotFound). The first error
// that is not a miss, before the first miss, is returned instead.
Result<size_t> PrefixInWaves(size_t n, int parallel, const std::function<Status(size_t)>& fetch) {
  const size_t wave = static_cast<size_t>(std::max(1, parallel)) * 4;
  for (size_t base = 0; base < n; base += wave) {
    const size_t count = std::min(wave, n - base);
    const std::vector<Status> st =
        ParallelFor(count, parallel, [&](size_t k) { return fetch(base + k); });
    for (size_t k = 0; k < count; ++k) {
      if (st[k].code() == StatusCode::kNotFound) return base + k;
      if (!st[k].ok()) return st[k];
    }
  }
  return n;
}

// Positions of a set of keys within the whole prefix, and the global prefix from each part's.
uint32_t GlobalPrefix(const std::vector<std::pair<size_t, std::vector<size_t>>>& parts,
                      const std::vector<uint32_t>& part_hits, size_t total) {
  size_t hits = total;
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::vector<size_t>& positions = parts[p].second;
    if (part_hits[p] < positions.size()) hits = std::min(hits, positions[part_hits[p]]);
  }
  return static_cast<uint32_t>(hits);
}

// Combines per-endpoint progress of an aggregated retrieval into one in-order report.
class Combiner {
 public:
  Combiner(const std::vector<std::pair<size_t, std::vector<size_t>>>& parts, size_t total,
           LayerRange layers, const FetchEvents& events)
      : parts_(parts),
        total_(total),
        layers_(layers),
        events_(events),
        part_hits_(parts.size()),
        done_(layers.last - layers.first, 0),
        next_(layers.first) {}

  void PartHits(size_t part, uint32_t hits) {
    std::lock_guard lock(mu_);
    if (part_hits_[part]) return;  // a retry: the first answer stands
    part_hits_[part] = hits;
    if (++parts_with_hits_ < parts_.size()) return;
    std::vector<uint32_t> h;
    for (const auto& ph : part_hits_) h.push_back(*ph);
    events_.hits(GlobalPrefix(parts_, h, total_));
  }

  void PartLayer(uint32_t layer) {
    std::lock_guard lock(mu_);
    done_[layer - layers_.first]++;
    while (next_ < fail_from_ && next_ < layers_.last &&
           done_[next_ - layers_.first] == parts_.size()) {
      events_.layer_ready(next_++);
    }
    ReportFailure();
  }

  // A part failed for good, having delivered the layers before `from`: those are still ready
  // once the other parts deliver them; then the failure is reported (once), while the other
  // parts may still run, not when the last of them ends.
  void PartFailed(const Status& s, uint32_t from) {
    std::lock_guard lock(mu_);
    if (from < fail_from_) {
      fail_from_ = from;
      failure_ = s;
    }
    ReportFailure();
  }

 private:
  void ReportFailure() {  // with mu_ held
    if (reported_ || next_ < fail_from_ || fail_from_ == kNoFailure) return;
    reported_ = true;
    if (events_.failed) events_.failed(failure_);
  }
  static constexpr uint32_t kNoFailure = UINT32_MAX;

  const std::vector<std::pair<size_t, std::vector<size_t>>>& parts_;
  const size_t total_;
  const LayerRange layers_;
  const FetchEvents& events_;
  std::mutex mu_;
  std::vector<std::optional<uint32_t>> part_hits_;  // guarded by mu_
  size_t parts_with_hits_ = 0;                      // guarded by mu_
  std::vector<size_t> done_;                        // guarded by mu_: parts done per layer
  uint32_t next_;                                   // guarded by mu_: next layer to report
  uint32_t fail_from_ = kNoFailure;                 // guarded by mu_: no layer from it is ready
  Status failure_;                                  // guarded by mu_
  bool reported_ = false;                           // guarded by mu_
};

}  // namespace

Status HttpFailure(unsigned status, const std::string& what, const std::string& error_body) {
  std::string m = what + ": server answered " + std::to_string(status);
  if (!error_body.empty()) m += ": " + error_body.substr(0, 512);
  if (status >= 500 || status == 429) return UnavailableError(m);
  if (status == 404) return NotFoundError(m);
  if (status == 403) return PermissionDeniedError(m);
  return InvalidArgumentError(m);
}

size_t Fetcher::EndpointFor(const ChunkKey& key) const {
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | key.bytes()[8 + i];
  return static_cast<size_t>(h % pool_->endpoints());
}

std::vector<std::pair<size_t, std::vector<size_t>>> Fetcher::SplitByEndpoint(
    std::span<const ChunkKey> keys) const {
  if (pool_->endpoints() == 1) {  // every key, in order, without hashing one
    std::vector<size_t> all(keys.size());
    std::iota(all.begin(), all.end(), size_t{0});
    return {{size_t{0}, std::move(all)}};
  }
  std::vector<std::vector<size_t>> by(pool_->endpoints());
  for (size_t i = 0; i < keys.size(); ++i) by[EndpointFor(keys[i])].push_back(i);
  std::vector<std::pair<size_t, std::vector<size_t>>> out;
  for (size_t e = 0; e < by.size(); ++e) {
    if (!by[e].empty()) out.emplace_back(e, std::move(by[e]));
  }
  return out;
}

Status Fetcher::WithRetries(size_t home, const std::function<Status(size_t)>& attempt) const {
  Status s;
  for (int i = 0;; ++i) {
    s = attempt(options_.failover ? (home + static_cast<size_t>(i)) % pool_->endpoints() : home);
    if (s.ok() || s.code() != StatusCode::kUnavailable || i >= options_.retries) return s;
    retries_.fetch_add(1, std::memory_order_relaxed);
    // The first retry at another endpoint goes at once; a retry at the same one backs off.
    if (!options_.failover || pool_->endpoints() == 1 || i > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 << std::min(i, 5)));
    }
  }
}

Result<std::string> Fetcher::Call(
    size_t home, std::string_view method, std::string_view query, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) const {
  std::string reply;
  Status s = WithRetries(home, [&](size_t endpoint) -> Status {
    reply.clear();
    std::unique_ptr<s3::S3Connection> conn = pool_->Take(endpoint);
    OC_ASSIGN_OR_RETURN(s3::S3Response res,
                        conn->Send(
                            method, "/" + bucket_, {{std::string(query), ""}}, body,
                            [&](std::span<const std::byte> b) {
                              if (b.size() > kMaxCallReplyBytes - reply.size()) {
                                return DataLossError(std::string(query) + ": the reply is over " +
                                                     std::to_string(kMaxCallReplyBytes) + " bytes");
                              }
                              reply.append(reinterpret_cast<const char*>(b.data()), b.size());
                              return Status();
                            },
                            headers));
    pool_->Return(endpoint, std::move(conn));
    if (res.status / 100 != 2) return HttpFailure(res.status, std::string(query), res.error_body);
    return Status();
  });
  if (!s.ok()) return s;
  return reply;
}

Status Fetcher::Aggregated(const FetchTarget& t, const FetchEvents& events) const {
  const uint64_t slice = t.model->layout.LayerSliceBytes();
  // Each endpoint's keys in `streams` contiguous stripes, one request (connection) each.
  std::vector<std::pair<size_t, std::vector<size_t>>> parts;
  const size_t streams = options_.streams > 0
                             ? static_cast<size_t>(options_.streams)
                             : std::clamp<size_t>(std::thread::hardware_concurrency() / 4, 1, 8);
  for (auto& [endpoint, positions] : SplitByEndpoint(t.keys)) {
    const size_t n = std::min(streams, positions.size());
    for (size_t k = 0; k < n; ++k) {
      parts.emplace_back(endpoint,
                         std::vector<size_t>(positions.begin() + positions.size() * k / n,
                                             positions.begin() + positions.size() * (k + 1) / n));
    }
  }
  Combiner combiner(parts, t.keys.size(), t.layers, events);
  // `next`: the first layer this part has not delivered yet.
  auto attempt_part = [&](size_t p, uint32_t& next) -> Status {
    const auto& [home, positions] = parts[p];
    wire::LayerwiseRequestBody body{.version = static_cast<uint16_t>(options_.wire_version),
                                    .last = t.layers.last,
                                    .model = *t.model,
                                    .compute_seconds_per_layer = t.compute_seconds_per_layer};
    for (size_t i : positions) body.keys.push_back(t.keys[i]);
    std::optional<uint32_t> first_hits;
    return WithRetries(home, [&](size_t endpoint) -> Status {
      if (next == t.layers.last) return Status();  // all delivered; only the end was lost
      body.first = next;
      LayerStreamDecoder decoder(
          [&](const LayerStreamHeader& h) -> Result<LayerPlacement> {
            if (h.first_layer != next || h.layer_count != t.layers.last - next ||
                h.slice_bytes != slice || h.keys != positions.size()) {
              return DataLossError("layerwise response does not match the request");
            }
            // A resumed request must still cover what the first one promised.
            if (first_hits && h.hits < *first_hits) {
              return FailedPreconditionError("the cached prefix shrank while resuming a retrieval");
            }
            if (!first_hits) {
              first_hits = h.hits;
              combiner.PartHits(p, h.hits);
            }
            const uint32_t first = next;
            return LayerPlacement{
                .slot = [&t, &positions, first](
                            uint32_t i, uint64_t j) { return t.slot(first + i, positions[j]); },
                .chunk_name = [&t,
                               &positions](uint64_t j) { return t.keys[positions[j]].ToHex(); }};
          },
          [&](uint32_t layer, const Status& s) {
            if (!s.ok()) return;  // the stream's error ends the attempt
            next = layer + 1;
            combiner.PartLayer(layer);
          });
      // The connection reads the payload straight into the slots (LayerStreamDecoder::NextBuffer).
      struct Receiver final : s3::BodyReceiver {
        explicit Receiver(LayerStreamDecoder& d) : decoder(d) {}
        std::span<std::byte> NextBuffer() override { return decoder.NextBuffer(); }
        Status Commit(size_t n) override { return decoder.Commit(n); }
        LayerStreamDecoder& decoder;
      } receiver(decoder);
      std::unique_ptr<s3::S3Connection> conn = pool_->Take(endpoint);
      Result<s3::S3Response> res =
          conn->Send("POST", "/" + bucket_, {{"layerwise", ""}}, wire::EncodeLayerwiseRequest(body),
                     nullptr, {}, &receiver);
      if (!res) return res.error();
      if (res->status != 200) return HttpFailure(res->status, "layerwise", res->error_body);
      OC_RETURN_IF_ERROR(decoder.Finish());
      pool_->Return(endpoint, std::move(conn));
      return Status();
    });
  };
  auto run_part = [&](size_t p) -> Status {
    uint32_t next = t.layers.first;
    Status s = attempt_part(p, next);
    if (!s.ok()) combiner.PartFailed(s, next);
    return s;
  };
  if (parts.size() == 1) return run_part(0);
  for (const Status& s : ParallelFor(parts.size(), static_cast<int>(parts.size()), run_part)) {
    OC_RETURN_IF_ERROR(s);
  }
  return Status();
}

namespace {

// A GET of `path` (whole, or `length` bytes at `offset`), its body handed to `on_body`.
Status Get(s3::ConnectionPool* pool, size_t endpoint, const std::string& path, uint64_t offset,
           std::optional<uint64_t> length,
           const std::function<Status(std::span<const std::byte>)>& on_body) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (length) {
    headers.emplace_back(
        "Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + *length - 1));
  }
  std::unique_ptr<s3::S3Connection> conn = pool->Take(endpoint);
  OC_ASSIGN_OR_RETURN(s3::S3Response res, conn->Send("GET", path, {}, "", on_body, headers));
  pool->Return(endpoint, std::move(conn));
  if (res.status != (length ? 206u : 200u)) return HttpFailure(res.status, path, res.error_body);
  return Status();
}

// Copies a piece of a ranged reply into `dest` at *filled; DataLoss past its end.
Status Append(std::span<std::byte> dest, size_t* filled, std::span<const std::byte> piece) {
  if (*filled + piece.size() > dest.size()) return DataLossError("reply longer than asked");
  std::memcpy(dest.data() + *filled, piece.data(), piece.size());
  *filled += piece.size();
  return Status();
}

}  // namespace

Status Fetcher::PlainLayerwise(const FetchTarget& t, const FetchEvents& events) const {
  const KvLayout& layout = t.model->layout;
  const uint64_t slice = layout.LayerSliceBytes();
  auto path = [&](size_t i) { return "/" + bucket_ + "/" + t.keys[i].ToHex(); };
  // The hit prefix: each chunk's header, a wave of requests at a time, up to the first miss
  // (or a header that is not a chunk of this key and layout, which ends the prefix too).
  std::vector<ChunkHeader> headers(t.keys.size());
  OC_ASSIGN_OR_RETURN(
      size_t hits, PrefixInWaves(t.keys.size(), options_.parallel, [&](size_t i) -> Status {
        std::string header(kChunkHeaderRegion, '\0');
        OC_RETURN_IF_ERROR(WithRetries(EndpointFor(t.keys[i]), [&](size_t endpoint) {
          size_t filled = 0;
          return Get(pool_, endpoint, path(i), 0, kChunkHeaderRegion,
                     [&](auto b) { return Append(AsWritableBytes(header), &filled, b); });
        }));
        Result<ChunkHeader> h = DecodeChunkHeader(AsBytes(header), {&layout, &t.keys[i]});
        if (!h) return NotFoundError("chunk " + t.keys[i].ToHex() + ": " + h.error().ToString());
        headers[i] = std::move(*h);
        return Status();
      }));
  headers.resize(hits);
  events.hits(static_cast<uint32_t>(headers.size()));
  for (uint32_t layer = t.layers.first; layer < t.layers.last; ++layer) {
    for (const Status& s : ParallelFor(headers.size(), options_.parallel, [&](size_t j) -> Status {
           std::span<std::byte> dest(t.slot(layer, j), slice);
           const Status got = WithRetries(EndpointFor(t.keys[j]), [&](size_t endpoint) {
             size_t filled = 0;
             Status s = Get(pool_, endpoint, path(j), headers[j].LayerOffset(layer), slice,
                            [&](auto b) { return Append(dest, &filled, b); });
             if (s.ok() && filled != slice) s = UnavailableError("short ranged reply");
             return s;
           });
           return got.ok() ? VerifyLayerSlice(headers[j], layer, dest) : got;
         })) {
      OC_RETURN_IF_ERROR(s);
    }
    events.layer_ready(layer);
  }
  return Status();
}

Status Fetcher::PlainChunkwise(const FetchTarget& t, const FetchEvents& events) const {
  const KvLayout& layout = t.model->layout;
  const uint64_t slice = layout.LayerSliceBytes();
  // Whole objects, a wave at a time, up to the first miss; each streams through a verifier
  // while its layer slices are scattered to their slots.
  OC_ASSIGN_OR_RETURN(
      size_t hits, PrefixInWaves(t.keys.size(), options_.parallel, [&](size_t i) -> Status {
        const ChunkHeader geometry = ChunkGeometry(layout, t.keys[i]);
        return WithRetries(EndpointFor(t.keys[i]), [&](size_t endpoint) -> Status {
          ChunkStreamVerifier verifier(
              {.layout = &layout, .key = &t.keys[i], .object_bytes = geometry.ObjectBytes()});
          uint64_t pos = 0;
          const Status got =
              Get(pool_, endpoint, "/" + bucket_ + "/" + t.keys[i].ToHex(), 0, std::nullopt,
                  [&](std::span<const std::byte> b) -> Status {
                    if (Status v = verifier.Feed(b); !v.ok()) return v;
                    // Scatter the parts of layer slices in the range to their slots.
                    for (uint64_t off = 0; off < b.size();) {
                      const uint64_t at = pos + off;
                      if (at < geometry.data_offset) {
                        off += geometry.data_offset - at;
                        continue;
                      }
                      const uint64_t layer = (at - geometry.data_offset) / geometry.layer_stride;
                      const uint64_t within = (at - geometry.data_offset) % geometry.layer_stride;
                      const uint64_t len = std::min<uint64_t>(
                          b.size() - off,
                          within < slice ? slice - within : geometry.layer_stride - within);
                      if (within < slice && layer >= t.layers.first && layer < t.layers.last) {
                        std::memcpy(t.slot(static_cast<uint32_t>(layer), i) + within,
                                    b.data() + off, len);
                      }
                      off += len;
                    }
                    pos += b.size();
                    return Status();
                  });
          if (!got.ok()) return got;
          return verifier.Finish();
        });
      }));
  events.hits(static_cast<uint32_t>(hits));
  for (uint32_t layer = t.layers.first; layer < t.layers.last; ++layer) events.layer_ready(layer);
  return Status();
}

Result<size_t> Fetcher::Lookup(std::span<const ChunkKey> keys) const {
  if (keys.empty()) return size_t{0};
  const auto parts = SplitByEndpoint(keys);
  std::vector<uint32_t> part_hits(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    // The binary body: 16 bytes per key, no JSON to write or parse (src/wire/lookup_wire.h).
    // A lone part is every key, in order (one endpoint, or every key on one).
    std::vector<ChunkKey> part;
    if (parts.size() > 1) {
      part.reserve(parts[p].second.size());
      for (size_t i : parts[p].second) part.push_back(keys[i]);
    }
    OC_ASSIGN_OR_RETURN(
        std::string reply,
        Call(parts[p].first, "POST", "lookup", wire::PutChunkKeys(parts.size() > 1 ? part : keys),
             {{"content-type", std::string(wire::kChunkKeysContentType)}}));
    nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
    // A count of the keys sent: a larger one (2^32 + 3 read as 3, say) is no answer to them.
    if (!j.is_object() || !j.contains("present_prefix") ||
        !j["present_prefix"].is_number_unsigned() ||
        j["present_prefix"].get<uint64_t>() > parts[p].second.size()) {
      return DataLossError("lookup: malformed reply");
    }
    part_hits[p] = j["present_prefix"].get<uint32_t>();
  }
  return size_t{GlobalPrefix(parts, part_hits, keys.size())};
}

Result<std::vector<ChunkKey>> Fetcher::Pin(std::span<const ChunkKey> keys,
                                           std::chrono::seconds ttl) const {
  std::vector<ChunkKey> missing;
  for (const auto& [endpoint, positions] : SplitByEndpoint(keys)) {
    nlohmann::json list = nlohmann::json::array();
    for (size_t i : positions) list.push_back(keys[i].ToHex());
    nlohmann::json body;
    body["keys"] = list;
    body["ttl_seconds"] = ttl.count();
    OC_ASSIGN_OR_RETURN(std::string reply, Call(endpoint, "POST", "pin", body.dump()));
    const nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
    if (!j.is_object() || !j.contains("missing") || !j["missing"].is_array()) {
      return DataLossError("pin: malformed reply");
    }
    // Only keys of this request can be missing from it.
    std::unordered_set<ChunkKey> sent;
    for (size_t i : positions) sent.insert(keys[i]);
    for (const auto& m : j["missing"]) {
      Result<ChunkKey> k = m.is_string() ? ChunkKey::FromHex(m.get<std::string>())
                                         : Result<ChunkKey>(DataLossError("pin: not a key"));
      if (!k) return DataLossError("pin: malformed reply: " + k.error().message());
      if (!sent.contains(*k)) {
        return DataLossError("pin: the reply names a key that was not sent: " + k->ToHex());
      }
      missing.push_back(*k);
    }
  }
  return missing;
}

Status Fetcher::BatchStore(std::span<const std::pair<ChunkKey, const std::string*>> records) const {
  std::vector<ChunkKey> keys;
  for (const auto& r : records) keys.push_back(r.first);
  for (const auto& [endpoint, positions] : SplitByEndpoint(keys)) {
    ByteWriter body;  // docs/wire-format.md, batch store
    for (size_t i : positions) {
      wire::PutBatchRecord(records[i].first.ToHex(), *records[i].second, &body);
    }
    wire::PutBatchEnd(&body);
    OC_RETURN_IF_ERROR(Call(endpoint, "POST", "batch-store", body.str()).status());
  }
  return Status();
}

}  // namespace objectcache::client
