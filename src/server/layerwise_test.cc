// The layerwise response (layerwise.cc) against stores that misbehave in time: slow range
// reads, headers the store cannot read, a store without files, responses that end early, a
// server stopped mid-response, and a memory budget too small for large read windows. One test
// runs the handler in a real server on 127.0.0.1, to stop that server in the middle of a
// response.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "objectcache/chunk_object.h"
#include "objectcache/kv_layout.h"
#include "server/http_server.h"
#include "server/memory_exchange.h"
#include "server/s3_handler.h"
#include "store/forwarding_store.h"
#include "store/memory/memory_store.h"

namespace objectcache::server {
namespace {

// A memory store whose range reads take `delay` before they start: a slow store, so that a
// response can end while one of its window reads is still running on the pool.
class SlowRangeStore final : public ForwardingStore {
 public:
  explicit SlowRangeStore(std::chrono::milliseconds delay)
      : ForwardingStore(NewMemoryStore()), delay_(delay) {}
  Status RetrieveRanges(std::span<RangeRead> reads) override {
    started_++;
    std::this_thread::sleep_for(delay_);
    Status s = ForwardingStore::RetrieveRanges(reads);  // reads every key's name
    finished_++;
    return s;
  }
  bool Idle() const { return started_ == finished_; }
  int finished() const { return finished_; }

 private:
  const std::chrono::milliseconds delay_;
  std::atomic<int> started_{0}, finished_{0};
};

// Reads slowly, and notes whether a read of layer 0's slices (offset `first_layer_offset`) ever
// ran beside another read.
class OverlapRecordingStore final : public ForwardingStore {
 public:
  explicit OverlapRecordingStore(uint64_t first_layer_offset)
      : ForwardingStore(NewMemoryStore()), first_layer_offset_(first_layer_offset) {}
  Status RetrieveRanges(std::span<RangeRead> reads) override {
    const bool first_layer = !reads.empty() && reads[0].offset == first_layer_offset_;
    {
      std::lock_guard lock(mu_);
      if (running_ > 0 && (first_layer || first_layer_running_)) first_layer_overlapped_ = true;
      ++running_;
      first_layer_running_ |= first_layer;
      first_layer_reads_ += first_layer;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Status s = ForwardingStore::RetrieveRanges(reads);
    std::lock_guard lock(mu_);
    --running_;
    if (first_layer) first_layer_running_ = false;
    return s;
  }
  bool first_layer_overlapped() {
    std::lock_guard lock(mu_);
    return first_layer_overlapped_;
  }
  int first_layer_reads() {
    std::lock_guard lock(mu_);
    return first_layer_reads_;
  }

 private:
  const uint64_t first_layer_offset_;
  std::mutex mu_;
  int running_ = 0, first_layer_reads_ = 0;
  bool first_layer_running_ = false, first_layer_overlapped_ = false;
};

// Four chunks of `model` in bucket "slow" of `store`; the body of a v1 layerwise request of all
// their layers.
std::string PutSlowChunks(Store& store, const ModelPreset& model) {
  std::string body =
      "{\"version\":1,\"layers\":[0," + std::to_string(model.layout.num_layers) + "],\"keys\":[";
  for (int c = 0; c < 4; ++c) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%032x", c + 1);
    const ChunkKey key = *ChunkKey::FromHex(hex);
    const std::string kv(model.layout.ChunkKvBytes(), static_cast<char>(c));
    EXPECT_TRUE(
        store
            .Put("slow/" + key.ToHex(), AsBytes(*EncodeChunkObject(model.layout, key, AsBytes(kv))))
            .ok());
    body += std::string(c ? "," : "") + "\"" + key.ToHex() + "\"";
  }
  return body + "]}";
}

// A layerwise request for `body` of `bucket` (created bound to `model` if it is not yet)
// through `handler`, on `io`: status and body. `io` must outlive the handler: a thread of the
// handler's pool may still be in its post to `io` when the request is done (TSan saw `io`
// destroyed under it), and the handler's destructor joins that pool.
std::pair<unsigned, std::string> RespondLayerwise(asio::io_context& io, S3Handler& handler,
                                                  const std::string& bucket,
                                                  const ModelPreset& model, const std::string& body,
                                                  bool sends_files = false,
                                                  uint64_t* file_bytes = nullptr) {
  MemoryHttpExchange put("PUT", "/" + bucket,
                         {{"host", "127.0.0.1"}, {"x-objectcache-kv-layout", ModelToJson(model)}},
                         "");
  RunExchange(io, handler, put);
  EXPECT_TRUE(put.status() == 200u || put.status() == 409u) << put.response_body();
  MemoryHttpExchange ex("POST", "/" + bucket + "?layerwise", {{"host", "127.0.0.1"}}, body);
  ex.SetSendsFiles(sends_files);
  RunExchange(io, handler, ex);
  if (file_bytes) *file_bytes = ex.file_bytes_sent();
  return {ex.status(), ex.response_body()};
}

// The first layer, which the requester waits for, is read alone: the next window's read starts
// once it is in (and runs while it is sent), not beside it, where it would share the store.
TEST(S3HandlerLayerwiseTest, TheFirstLayerIsReadAlone) {
  const ModelPreset model{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};
  OverlapRecordingStore store(ChunkGeometry(model.layout, ChunkKey()).LayerOffset(0));
  const std::string body = PutSlowChunks(store, model);
  ServerMetrics metrics;
  S3Options options;
  options.anonymous = true;  // windows of layer 0, then layers 1-2, then 3
  asio::io_context io;       // outlives the handler (RespondLayerwise)
  S3Handler handler(&store, &metrics, options);
  for (int i = 0; i < 3; ++i) {
    const auto [status, response] = RespondLayerwise(io, handler, "slow", model, body);
    ASSERT_EQ(status, 200u) << response;
    EXPECT_GT(response.size(), 4 * 4 * model.layout.LayerSliceBytes());
  }
  EXPECT_EQ(store.first_layer_reads(), 3);
  EXPECT_FALSE(store.first_layer_overlapped());
}

// A memory store that counts the presence checks made of it.
class ExistCountingStore final : public ForwardingStore {
 public:
  ExistCountingStore() : ForwardingStore(NewMemoryStore()) {}
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override {
    ++exist_calls;
    return ForwardingStore::Exist(keys);
  }
  Result<size_t> CountPresentPrefix(std::span<const std::string> keys) override {
    ++exist_calls;
    return ForwardingStore::CountPresentPrefix(keys);
  }
  std::atomic<int> exist_calls{0};
};

// A memory store whose reads of one object fail as a cluster's do when it does not answer.
class UnansweredObjectStore final : public ForwardingStore {
 public:
  explicit UnansweredObjectStore(std::string key)
      : ForwardingStore(NewMemoryStore()), key_(std::move(key)) {}
  Status RetrieveRanges(std::span<RangeRead> reads) override {
    Status s = ForwardingStore::RetrieveRanges(reads);
    for (RangeRead& r : reads) {
      if (r.key == key_) r.status = UnavailableError("reading '" + key_ + "': no answer");
    }
    return s;
  }

 private:
  const std::string key_;
};

// A chunk header the store could not read (its cluster not answering) fails the request with
// 503: an outage is not a miss, and answering with the chunks before it as the whole prefix
// would say the rest is not cached (and a resumed retrieval that the prefix shrank).
TEST(S3HandlerLayerwiseTest, AHeaderTheStoreCouldNotReadIsAnErrorNotTheEndOfThePrefix) {
  const ModelPreset model{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};
  UnansweredObjectStore store("slow/" + std::string(31, '0') + "3");  // the third chunk
  const std::string body = PutSlowChunks(store, model);
  ServerMetrics metrics;
  S3Options options;
  options.anonymous = true;
  asio::io_context io;  // outlives the handler (RespondLayerwise)
  S3Handler handler(&store, &metrics, options);
  const auto [status, response] = RespondLayerwise(io, handler, "slow", model, body);
  EXPECT_EQ(status, 503u) << response.substr(0, 200);
  EXPECT_NE(response.find("ServiceUnavailable"), std::string::npos) << response.substr(0, 200);
}

// Over a store without files (RADOS, say), a v2 request on a connection that could send files
// goes straight to the headers: counting the present prefix first, to open the files, was one
// more round of store operations (over RADOS, a stat of every key) before the first layer.
TEST(S3HandlerLayerwiseTest, AStoreWithoutFilesIsNotAskedWhichChunksArePresent) {
  ExistCountingStore store;
  const ModelPreset model{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};
  std::string body = PutSlowChunks(store, model);
  body.replace(body.find("\"version\":1"), 11, "\"version\":2");
  ServerMetrics metrics;
  S3Options options;
  options.anonymous = true;
  asio::io_context io;  // outlives the handler (RespondLayerwise)
  S3Handler handler(&store, &metrics, options);
  uint64_t file_bytes = 1;
  const auto [status, response] =
      RespondLayerwise(io, handler, "slow", model, body, /*sends_files=*/true, &file_bytes);
  ASSERT_EQ(status, 200u) << response;
  EXPECT_EQ(file_bytes, 0u);
  EXPECT_GT(response.size(), 4 * 4 * model.layout.LayerSliceBytes());
  EXPECT_EQ(store.exist_calls.load(), 0);
}

// The client goes away while a copied layerwise response waits on its store: the response ends
// with the next window's read still running on the pool, and that read must still find every
// name it was given (under ASan, scripts/sanitize, a freed name is an error). The handler then
// serves the next request whole.
TEST(S3HandlerLayerwiseTest, AResponseEndingEarlyLeavesItsRunningReadsTheirNames) {
  SlowRangeStore store(std::chrono::milliseconds(100));
  ServerMetrics metrics;
  const ModelPreset model{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};
  const uint64_t slice = model.layout.LayerSliceBytes();  // 64 KiB
  S3Options options;
  options.anonymous = true;
  options.blocking_threads = 1;            // the next window's read starts after this one's
  options.layerwise_window_bytes = slice;  // a window per chunk and layer
  // Before the handler, so that it outlives the handler's pool: a read that finishes after the
  // last exchange posts its completion to `io`, which must still be there (ASan/UBSan saw the
  // reverse order when a read's post came after the last run of `io`).
  asio::io_context io;
  S3Handler handler(&store, &metrics, options);
  auto call = [&](std::string method, std::string target, std::string body, Headers headers,
                  uint64_t write_limit) {
    headers.emplace_back("host", "127.0.0.1");
    auto ex = std::make_unique<MemoryHttpExchange>(std::move(method), std::move(target),
                                                   std::move(headers), std::move(body));
    ex->FailWritesAfter(write_limit);
    RunExchange(io, handler, *ex);
    return ex;
  };
  ASSERT_EQ(call("PUT", "/slow", "", {{"x-objectcache-kv-layout", ModelToJson(model)}}, UINT64_MAX)
                ->status(),
            200u);
  const std::string body = PutSlowChunks(store, model);
  // The response header and the first frame's header fit; its first slice does not.
  auto cut = call("POST", "/slow?layerwise", body, {}, 4096);
  EXPECT_EQ(cut->status(), 200u);
  EXPECT_FALSE(cut->complete());
  // The next window's read was queued or sleeping on the pool when the response ended: it
  // finishes afterwards.
  const int finished_at_cut = store.finished();
  for (int i = 0; i < 500 && (store.finished() == finished_at_cut || !store.Idle()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(store.finished(), finished_at_cut);
  EXPECT_TRUE(store.Idle());
  auto whole = call("POST", "/slow?layerwise", body, {}, UINT64_MAX);
  EXPECT_TRUE(whole->complete());
  EXPECT_GT(whole->response_body().size(), 4 * 4 * slice);
}

// A server stopped while a layerwise response waits on its store (the grace cut it off) returns
// from Stop only once that store call has ended: the call's completion goes to the server's
// event loop, which is destroyed with the server right after (under ASan, scripts/sanitize, a
// post into it was an error before the handler was quiesced in Stop).
TEST(S3HandlerLayerwiseTest, AStoppedServerOutlivesItsHandlersStoreCalls) {
  SlowRangeStore store(std::chrono::milliseconds(200));
  ServerMetrics metrics;
  const ModelPreset model{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};
  S3Options options;
  options.anonymous = true;
  options.blocking_threads = 1;
  options.layerwise_window_bytes = model.layout.LayerSliceBytes();  // 16 reads, one at a time
  asio::io_context io;  // outlives the handler (RespondLayerwise)
  S3Handler handler(&store, &metrics, options);
  {
    MemoryHttpExchange put("PUT", "/slow",
                           {{"host", "127.0.0.1"}, {"x-objectcache-kv-layout", ModelToJson(model)}},
                           "");
    RunExchange(io, handler, put);
    ASSERT_EQ(put.status(), 200u);
  }
  const std::string body = PutSlowChunks(store, model);
  HttpServerOptions http;
  http.port = 0;
  http.shutdown_grace = std::chrono::seconds(0);
  Result<std::unique_ptr<HttpServer>> srv = HttpServer::Start(http, &handler, &metrics);
  ASSERT_TRUE(srv.has_value()) << srv.error().ToString();

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((*srv)->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request =
      "POST /slow?layerwise HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  char first[16];
  ASSERT_GT(::recv(fd, first, sizeof(first), 0), 0);  // the response has begun
  for (int i = 0; i < 100 && store.Idle(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(store.Idle());  // a window's read sleeps in the store

  (*srv)->Stop();
  EXPECT_TRUE(store.Idle());
  srv->reset();
  ::close(fd);
}

// 128 chunks of a layout of 4 layers with 64 KiB slices (8 MiB a layer) put in bucket "budget"
// of `store`, different bytes in every page; the body of a v1 layerwise request for all of them.
std::string PutBudgetChunks(Store& store, const ModelPreset& model) {
  std::string body = "{\"version\":1,\"layers\":[0,4],\"keys\":[";
  for (int c = 0; c < 128; ++c) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%032x", c + 1);
    const ChunkKey key = *ChunkKey::FromHex(hex);
    std::string kv(model.layout.ChunkKvBytes(), '\0');
    for (size_t i = 0; i < kv.size(); i += 4096) kv[i] = static_cast<char>(c + i / 4096);
    EXPECT_TRUE(store
                    .Put("budget/" + key.ToHex(),
                         AsBytes(*EncodeChunkObject(model.layout, key, AsBytes(kv))))
                    .ok());
    body += std::string(c ? "," : "") + "\"" + key.ToHex() + "\"";
  }
  return body + "]}";
}

const ModelPreset kWideModel{"wide", KvLayout{4, 8, 128, KvDtype::kBf16, 16}};  // 64 KiB slices

// Windows of several layers come from the request memory budget. A budget that cannot lend two
// of the configured size serves the response with small windows (groups of chunks of one
// layer), byte for byte the same; one that cannot lend even those answers 503 SlowDown.
TEST(S3HandlerLayerwiseTest, ABudgetShortOfLargeWindowsServesWithSmallOnes) {
  std::unique_ptr<Store> store = NewMemoryStore();
  const std::string body = PutBudgetChunks(*store, kWideModel);  // 4 MiB windows: half a layer
  auto respond = [&](uint64_t budget) {
    ServerMetrics metrics;
    S3Options options;
    options.anonymous = true;
    options.layerwise_window_bytes = 64 << 20;  // all four layers in a window: 32 MiB
    options.request_memory_bytes = budget;
    asio::io_context io;  // outlives the handler (RespondLayerwise)
    S3Handler handler(store.get(), &metrics, options);
    return RespondLayerwise(io, handler, "budget", kWideModel, body);
  };
  const auto [large_status, large] = respond(1ull << 30);  // two windows of 32 MiB
  ASSERT_EQ(large_status, 200u) << large;
  EXPECT_GT(large.size(), 4 * 128 * kWideModel.layout.LayerSliceBytes());
  const auto [small_status, small] = respond(12 << 20);  // two of 4 MiB, not of 8 or 32
  EXPECT_EQ(small_status, 200u);
  EXPECT_EQ(small, large);
  const auto [none_status, none] = respond(6 << 20);  // not even two of 4 MiB
  EXPECT_EQ(none_status, 503u);
  EXPECT_NE(none.find("SlowDown"), std::string::npos);
}

// The windows a response gives back are kept for the next one (window_buffers.h) within the same
// budget: they count in it while kept, and give way to a response that needs the room.
TEST(S3HandlerLayerwiseTest, KeptWindowsCountInTheBudgetAndGiveWayToAResponse) {
  std::unique_ptr<Store> store = NewMemoryStore();
  const std::string body = PutBudgetChunks(*store, kWideModel);
  ServerMetrics metrics;
  S3Options options;
  options.anonymous = true;
  options.layerwise_window_bytes = 64 << 20;  // two windows of 32 MiB a response
  options.request_memory_bytes = 80 << 20;    // not room for those beside two kept ones
  asio::io_context io;                        // outlives the handler (RespondLayerwise)
  S3Handler handler(store.get(), &metrics, options);
  const auto [first_status, first] = RespondLayerwise(io, handler, "budget", kWideModel, body);
  ASSERT_EQ(first_status, 200u) << first;
  EXPECT_EQ(handler.request_memory_used(), 64u << 20);  // its two windows, kept
  // The kept windows are dropped for the next response rather than halving its windows: it
  // then keeps its own two of 32 MiB, not 64 MiB beside two of 8 MiB.
  const auto [second_status, second] = RespondLayerwise(io, handler, "budget", kWideModel, body);
  ASSERT_EQ(second_status, 200u);
  EXPECT_EQ(second, first);
  EXPECT_EQ(handler.request_memory_used(), 64u << 20);
}

}  // namespace
}  // namespace objectcache::server
