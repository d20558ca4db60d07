// Layerwise aggregated retrieval (docs/wire-format.md): one request names the ordered chunk
// keys, the layer range and the layout; the response streams the hit count and then one frame
// per layer, every hit chunk's slice of that layer in request order, with a checksum per frame.

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <memory>

#include <fcntl.h>

#include "core/byte_order.h"
#include "core/page_buffer.h"
#include "core/xxh3.h"
#include "objectcache/chunk_object.h"
#include "objectcache/layer_reader.h"
#include "server/log.h"
#include "server/paced_transfer.h"
#include "server/s3_handler.h"
#include "server/window_buffers.h"
#include "wire/layerwise_request.h"
#include "wire/layerwise_wire.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;
namespace {

// The smallest window a copied layerwise response falls back to when the memory budget cannot
// lend two of the configured size (64 Llama-3.1-8B slices).
constexpr uint64_t kSmallWindow = 4 << 20;

using LayerwiseRequest = wire::LayerwiseRequestBody;

S3Result<LayerwiseRequest> ParseRequest(std::string_view body, size_t max_keys) {
  Result<LayerwiseRequest> r = wire::DecodeLayerwiseRequest(body, max_keys);
  if (!r) return Fail("InvalidArgument", r.error().message());
  return std::move(*r);
}

// What a window's read found: OK, or the first failure and how many of the window's layers
// before it were read whole; and where the slices of those layers are (in the window's buffer,
// or in memory the store lent, kept in `held`), in the window's order.
struct WindowReadResult {
  Status status;
  uint32_t whole_layers = 0;
  std::vector<std::span<const std::byte>> slices;
  HeldMemory held;
};

// One window's read, run on the store pool while the coroutine sends the previous window.
// Shared with the pool task, so a coroutine that ends early (the client went away) leaves the
// buffer alive until the read is done with it, and the buffer's share of the response's memory
// lease with it; that share is given back as the buffer goes to be kept (window_buffers.h).
class WindowRead : public std::enable_shared_from_this<WindowRead> {
 public:
  WindowRead(asio::any_io_executor home, std::shared_ptr<WindowBuffers> buffers, size_t bytes,
             MemoryBudget::Lease lease)
      : buf(buffers->Take(bytes)),
        timer_(home),
        buffers_(std::move(buffers)),
        lease_(std::move(lease)) {}
  ~WindowRead() {
    lease_.ShrinkTo(0);
    buffers_->Give(std::move(buf));
  }

  template <typename F>
  void Start(asio::thread_pool& pool, F read) {
    done_ = false;
    asio::post(pool, [self = shared_from_this(), read = std::move(read)]() mutable {
      WindowReadResult r = read();
      // The pool lets go of the read as it hands it back: the last reference, and with it the
      // timer, is then always dropped on the coroutine's executor, never here after that
      // executor's io_context may be gone (UBSan saw that in a test that ends its io_context as
      // soon as the response is complete).
      const auto home = self->timer_.get_executor();
      asio::post(home, [self = std::move(self), r = std::move(r)]() mutable {
        self->result_ = std::move(r);
        self->done_ = true;
        self->timer_.cancel();
      });
    });
  }

  // The read's result, once it is done (moved out: the caller holds the lent memory for as long
  // as it sends the slices). done_ and the timer live on the coroutine's executor.
  asio::awaitable<WindowReadResult> Await() {
    while (!done_) {
      timer_.expires_at(asio::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return std::move(result_);
  }

  // Page-aligned (the kernel copies into it at full speed, page_buffer.h), its pages made
  // resident when first written (window_buffers.h); at least the window's bytes.
  PageBuffer buf;

 private:
  asio::steady_timer timer_;
  std::shared_ptr<WindowBuffers> buffers_;
  MemoryBudget::Lease lease_;  // covers buf
  bool done_ = false;
  WindowReadResult result_;
};

// A frame's header for `layer` of the hit chunks; in v2, with each slice's checksum as its writer
// stored it.
void PutFrameHeaderAndChecksums(uint32_t layer, const std::vector<ChunkHeader>& headers,
                                uint64_t slice, bool v2, ByteWriter* out) {
  const auto hits = static_cast<uint32_t>(headers.size());
  wire::PutFrameHeader({.layer = layer, .chunks = hits, .payload_bytes = hits * slice}, out);
  if (!v2) return;
  std::vector<uint64_t> sums(hits);
  for (uint32_t j = 0; j < hits; ++j) sums[j] = headers[j].layer_checksums[layer];
  wire::PutSliceChecksums(sums, out);
}

// The hit prefix of a request: the leading chunks that exist and whose headers check out, with
// (for sending from files) each one's reader, which pins the version its header came from.
struct HitPrefix {
  std::vector<ChunkHeader> headers;
  std::vector<std::unique_ptr<ObjectReader>> readers;  // empty unless read from files
};

void LogPrefixEnd(const ChunkKey& key, const Status& why) {
  LogWarn("layerwise: chunk " + key.ToHex() + " ends the prefix: " + why.ToString());
}

// The headers of the first `present` chunks (ReadChunkHeaderPrefix, layer_reader.h); a missing
// chunk (NotFound) ends the prefix there, so `present` may be all the keys. A damaged or foreign
// header ends the prefix like a miss (the engine recomputes from there); it is logged. A read the
// store could not make (Unavailable) is the request's error. Blocking.
Result<HitPrefix> ReadHitPrefix(Store& store, const std::vector<std::string>& names, size_t present,
                                const LayerwiseRequest& req, const KvLayout& layout) {
  // (Runs on a blocking thread: at most --blocking-threads of these reads at once.)
  OC_ASSIGN_OR_RETURN(ChunkHeaderPrefix p,
                      ReadChunkHeaderPrefix(store, layout, std::span(req.keys).first(present),
                                            std::span(names).first(present)));
  if (!p.end.ok() && p.end.code() != StatusCode::kNotFound) {
    LogWarn("layerwise: the prefix ends at " + p.end.ToString());
  }
  return HitPrefix{.headers = std::move(p.headers), .readers = {}};
}

// The same, for sending from files: each chunk's header read through a reader that stays open,
// so that the slices sent are of the version whose checksums the frames carry. A chunk whose
// object is shorter than its header says ends the prefix. nullopt when the store keeps its
// bytes outside files or a reader cannot be opened (then they are sent copied). Blocking.
Result<std::optional<HitPrefix>> ReadHitPrefixFromFiles(Store& store,
                                                        const std::vector<std::string>& names,
                                                        size_t present, const LayerwiseRequest& req,
                                                        const KvLayout& layout) {
  HitPrefix out;
  std::string buf(kChunkHeaderRegion, '\0');
  const uint64_t slice = layout.LayerSliceBytes();
  for (size_t i = 0; i < present; ++i) {
    Result<std::unique_ptr<ObjectReader>> reader = store.OpenReaderIfCached(names[i]);
    if (!reader && reader.error().code() == StatusCode::kUnavailable) {
      reader = store.OpenReader(names[i]);
    }
    if (!reader && reader.error().code() != StatusCode::kNotFound) {
      // Out of descriptors, say (a response from files holds one per hit chunk, shared with the
      // store's open-file cache): the copied path needs none of its own.
      LogWarn("layerwise: sending copied: " + reader.error().ToString());
      return std::nullopt;
    }
    if (!reader) {  // deleted since it was counted
      LogPrefixEnd(req.keys[i], reader.error());
      break;
    }
    const std::optional<ObjectReader::FileExtent> file = (*reader)->file_extent();
    if (!file) return std::nullopt;
    const auto region = AsWritableBytes(buf).first(
        static_cast<size_t>(std::min<uint64_t>((*reader)->size(), kChunkHeaderRegion)));
    ChunkExpectation expect{.layout = &layout, .key = &req.keys[i]};
    const Status read = (*reader)->ReadAt(0, region);
    Result<ChunkHeader> h =
        read.ok() ? DecodeChunkHeader(region, expect) : Result<ChunkHeader>(read);
    if (h && h->LayerOffset(req.last - 1) + slice > (*reader)->size()) {
      h = DataLossError("the object is shorter than its header says");
    }
    if (!h) {
      LogPrefixEnd(req.keys[i], h.error());
      break;
    }
    out.headers.push_back(std::move(*h));
    out.readers.push_back(std::move(*reader));
  }
  return out;
}

// Asks the kernel to read ahead layers [first, last) of every chunk of `prefix` (read from
// files): one range per chunk, chunk objects being layer-major. Blocking, and not cheap even when
// the pages are cached (the kernel walks them: about 25 us per 2 MiB chunk), so beyond the first
// layer it runs on the store pool once that layer is sent, not before; and a chunk whose range
// has both ends in the page cache is left alone (written or read whole before, as chunks are).
void ReadAheadFiles(const HitPrefix& prefix, uint32_t first, uint32_t last, uint64_t slice) {
  for (size_t k = 0; k < prefix.readers.size(); ++k) {
    const ObjectReader& reader = *prefix.readers[k];
    const ChunkHeader& h = prefix.headers[k];
    const uint64_t from = h.LayerOffset(first), to = h.LayerOffset(last - 1) + slice;
    if (InPageCache(reader, from, to)) continue;
    const ObjectReader::FileExtent file = *reader.file_extent();
    (void)::posix_fadvise(file.fd, static_cast<off_t>(file.base + from),
                          static_cast<off_t>(to - from), POSIX_FADV_WILLNEED);
  }
}

// What a layerwise response's frames are made of, once its hit prefix is known. `names` is
// shared with the window reads still running on the store pool when the response ends early.
struct FrameSource {
  const LayerwiseRequest& req;
  std::shared_ptr<const std::vector<std::string>> names;
  std::shared_ptr<const HitPrefix> prefix;
  uint64_t slice;
  bool v2;
  uint32_t hits() const { return static_cast<uint32_t>(prefix->headers.size()); }
};

// The frames of every requested layer, each hit's slice sent straight from its file (one
// sendfile per slice). Once the first layer is sent (what the requester waits for), the read-
// ahead of the others starts on `pool`. False when the connection failed.
asio::awaitable<bool> SendFramesFromFiles(HttpExchange& ex, asio::thread_pool& pool,
                                          const FrameSource& src, PacedTransfer& paced) {
  const std::vector<ChunkHeader>& headers = src.prefix->headers;
  for (uint32_t layer = src.req.first; layer < src.req.last; ++layer) {
    ByteWriter fh;
    PutFrameHeaderAndChecksums(layer, headers, src.slice, src.v2, &fh);
    if (!(co_await ex.WriteBody(AsBytes(fh.str()))).ok()) co_return false;
    std::vector<FilePiece> pieces(src.hits());
    for (uint32_t k = 0; k < src.hits(); ++k) {
      const ObjectReader::FileExtent file = *src.prefix->readers[k]->file_extent();
      pieces[k] = {
          .fd = file.fd, .offset = file.base + headers[k].LayerOffset(layer), .length = src.slice};
    }
    if (!(co_await paced.WriteFiles(ex, pieces)).ok()) co_return false;
    if (layer == src.req.first && layer + 1 < src.req.last) {
      // Holds the files open until it is done, even if the response ends first.
      asio::post(pool, [prefix = src.prefix, from = layer + 1, to = src.req.last,
                        slice = src.slice] { ReadAheadFiles(*prefix, from, to, slice); });
    }
    ByteWriter ft;
    wire::PutFrameTrailer({}, &ft);
    if (!(co_await ex.WriteBody(AsBytes(ft.str()))).ok()) co_return false;
  }
  co_return true;
}

// Which chunks and layers each read window of a copied response holds. When one layer of every
// hit chunk fits a window, a window holds that many whole layers (each chunk's consecutive
// layers are one range of its object: one read from RADOS), except the first, which holds one
// layer, the one the requester waits for. Otherwise a window holds a group of chunks of one layer.
struct WindowPlan {
  struct Window {
    uint32_t layer, layers;  // layers [layer, layer + layers)
    size_t start, n;         // hit chunks [start, start + n)
  };
  uint32_t first, last;
  size_t hits;
  size_t chunks_per_window;  // `hits` when whole layers fit
  uint32_t layers_per_window;

  WindowPlan(uint32_t first_layer, uint32_t last_layer, size_t hit_chunks, uint64_t slice,
             uint64_t window_bytes)
      : first(first_layer), last(last_layer), hits(hit_chunks) {
    const uint64_t per_layer = uint64_t{hits} * slice;
    chunks_per_window =
        static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(hits, window_bytes / slice)));
    layers_per_window = static_cast<uint32_t>(std::max<uint64_t>(
        1, per_layer == 0 ? 1 : std::min<uint64_t>(last - first, window_bytes / per_layer)));
  }
  // The most bytes a window holds.
  uint64_t WindowBytes(uint64_t slice) const {
    return uint64_t{chunks_per_window} * layers_per_window * slice;
  }
  Window First() const { return {first, 1, 0, std::min(chunks_per_window, hits)}; }
  std::optional<Window> Next(const Window& w) const {
    const size_t start = w.start + w.n;
    if (start < hits) return Window{w.layer, 1, start, std::min(chunks_per_window, hits - start)};
    const uint32_t layer = w.layer + w.layers;
    if (layer >= last) return std::nullopt;
    // Whole layers: twice the last window's, up to the bound (1, 2, 4, 8, 8, ...), so that the
    // layers right after the first do not wait on the read of a full window.
    const uint32_t layers = static_cast<uint32_t>(
        std::min<uint64_t>({layers_per_window, last - layer, uint64_t{w.layers} * 2}));
    return Window{layer, layers, 0, std::min(chunks_per_window, hits)};
  }
};

// The frames of every requested layer, read by the store a window at a time into memory (v1,
// TLS, stores without files) and sent from there; a window's layers lie one after the other in
// its buffer, each layer's chunks in request order. The store reads the next window while this
// one is sent. False when the connection failed; `failure` is the first read that failed (its
// layer is sent zeroed with the failure in its trailer, and no layer after it).
asio::awaitable<bool> SendFramesCopied(HttpExchange& ex, Store& store, asio::thread_pool& pool,
                                       const std::shared_ptr<WindowBuffers>& buffers,
                                       MemoryBudget::Lease lease, const FrameSource& src,
                                       const WindowPlan& plan, PacedTransfer& paced,
                                       Status* failure) {
  const uint32_t hits = src.hits();
  const uint64_t slice = src.slice;
  const auto home = co_await asio::this_coro::executor;
  const size_t window_bytes = hits == 0 ? 0 : plan.WindowBytes(slice);  // none without hits
  std::shared_ptr<WindowRead> windows[2] = {
      std::make_shared<WindowRead>(home, buffers, window_bytes, lease.Split(window_bytes)),
      std::make_shared<WindowRead>(home, buffers, window_bytes, lease.Split(window_bytes))};
  auto start_read = [&](const WindowPlan::Window& w, WindowRead& into) {
    std::vector<RangeRead> reads(size_t{w.layers} * w.n);
    std::vector<std::pair<ChunkKey, uint32_t>> what(reads.size());  // for errors
    // The headers are copied for the read only in v1, which verifies against them.
    std::vector<ChunkHeader> hs;
    for (uint32_t l = 0; l < w.layers; ++l) {
      for (size_t k = 0; k < w.n; ++k) {
        const size_t i = size_t{l} * w.n + k;
        const ChunkHeader& h = src.prefix->headers[w.start + k];
        reads[i] = {.key = (*src.names)[w.start + k],
                    .offset = h.LayerOffset(w.layer + l),
                    .dest = into.buf.bytes().subspan(i * slice, slice)};
        what[i] = {src.req.keys[w.start + k], w.layer + l};
        if (!src.v2) hs.push_back(h);
      }
    }
    into.Start(pool,
               [&store, v2 = src.v2, n = w.n, names = src.names, reads = std::move(reads),
                what = std::move(what), hs = std::move(hs)]() mutable -> WindowReadResult {
                 WindowReadResult r;
                 if (Status s = store.RetrieveRangesInPlace(reads, &r.held); !s.ok()) {
                   return {s, 0, {}, {}};
                 }
                 for (size_t i = 0; i < reads.size(); ++i) {
                   Status s = reads[i].status.Annotate("chunk " + what[i].first.ToHex());
                   if (s.ok() && !v2) s = VerifyLayerSlice(hs[i], what[i].second, reads[i].data);
                   if (!s.ok()) {
                     r.status = std::move(s);
                     r.whole_layers = static_cast<uint32_t>(i / n);
                     break;
                   }
                   r.slices.push_back(reads[i].data);
                 }
                 return r;
               });
  };
  Xxh3Stream checksum;
  std::optional<WindowPlan::Window> w = hits > 0 ? std::optional(plan.First()) : std::nullopt;
  if (w) start_read(*w, *windows[0]);
  for (size_t i = 0; w; ++i) {
    // The next window is read while this one is read and sent, except after the first: the
    // first layer, which the requester waits for, is read alone. With the second window's read
    // (twice its size) beside it, they shared the store, and over RADOS the first layer came
    // 1.3-2x later (docs/ceph.md).
    const std::optional<WindowPlan::Window> next = plan.Next(*w);
    if (i > 0 && next && failure->ok()) start_read(*next, *windows[(i + 1) % 2]);
    WindowRead& window = *windows[i % 2];
    const WindowReadResult read = co_await window.Await();
    if (i == 0 && next && failure->ok()) start_read(*next, *windows[(i + 1) % 2]);
    for (uint32_t l = 0; l < w->layers; ++l) {
      const uint32_t layer = w->layer + l;
      if (failure->ok() && !read.status.ok() && l >= read.whole_layers) {
        *failure = read.status;
        LogWarn("layerwise: " + failure->ToString());
      }
      if (w->start == 0) {
        ByteWriter fh;
        PutFrameHeaderAndChecksums(layer, src.prefix->headers, slice, src.v2, &fh);
        if (!(co_await ex.WriteBody(AsBytes(fh.str()))).ok()) co_return false;
        checksum.Reset();
      }
      // The layer's slices as read (those that lie one after the other, as in the window, as
      // one piece), or zeros from the failed one on.
      std::vector<std::span<const std::byte>> pieces;
      if (failure->ok()) {
        for (std::span<const std::byte> p :
             std::span(read.slices).subspan(size_t{l} * w->n, w->n)) {
          if (!pieces.empty() && pieces.back().data() + pieces.back().size() == p.data()) {
            pieces.back() = {pieces.back().data(), pieces.back().size() + p.size()};
          } else {
            pieces.push_back(p);
          }
        }
      } else {
        std::span<std::byte> dest = window.buf.bytes().subspan(l * w->n * slice, w->n * slice);
        std::fill(dest.begin(), dest.end(), std::byte{0});
        pieces.push_back(dest);
      }
      if (!src.v2) {
        for (std::span<const std::byte> p : pieces) checksum.Update(p.data(), p.size());
      }
      if (!(co_await paced.WritePieces(ex, pieces)).ok()) co_return false;
      if (w->start + w->n == hits) {
        ByteWriter ft;
        wire::PutFrameTrailer({.status = static_cast<uint32_t>(failure->code()),
                               .checksum = src.v2 ? 0 : checksum.Digest()},
                              &ft);
        if (!(co_await ex.WriteBody(AsBytes(ft.str()))).ok()) co_return false;
        if (!failure->ok()) co_return true;  // no later layer follows a failed one
      }
    }
    w = next;
  }
  co_return true;
}

}  // namespace

S3Result<void> CheckLayerwiseRequestBody(std::string_view body, size_t max_keys) {
  auto req = ParseRequest(body, max_keys);
  if (!req) return std::unexpected(req.error());
  return S3Result<void>();
}

asio::awaitable<S3Result<void>> S3Handler::LayerwiseRetrieve(Ctx& c) {
  auto body = co_await ReadSmallBody(c, 4096 + options_.max_lookup_keys * 40);
  if (!body) co_return std::unexpected(body.error());
  auto req = ParseRequest(*body, options_.max_lookup_keys);
  if (!req) co_return std::unexpected(req.error());
  if (!req->model && !c.bucket.layout) {
    co_return Fail("InvalidArgument", "name a \"layout\" (the bucket is not bound to one)");
  }
  if (req->model && c.bucket.layout && req->model->layout != c.bucket.layout->layout) {
    co_return Fail("InvalidArgument", "the request's layout differs from the bucket's");
  }
  const KvLayout layout = req->model ? req->model->layout : c.bucket.layout->layout;
  if (req->first >= req->last || req->last > layout.num_layers) {
    co_return Fail("InvalidArgument", "\"layers\" [" + std::to_string(req->first) + ", " +
                                          std::to_string(req->last) +
                                          ") is empty or outside the layout");
  }
  // Window memory is the server's to bound, whatever the layout says: a window holds at least
  // one slice, so a slice larger than the window is refused before anything is allocated.
  if (layout.LayerSliceBytes() > options_.layerwise_window_bytes) {
    co_return Fail("InvalidArgument",
                   "a layer slice of this layout is " + std::to_string(layout.LayerSliceBytes()) +
                       " bytes, more than the server's layerwise window of " +
                       std::to_string(options_.layerwise_window_bytes) + " bytes");
  }
  const auto names =
      std::make_shared<const std::vector<std::string>>(ChunkObjectKeys(c.req.bucket, req->keys));

  // Version 2 hands the writer's checksums to the client, which verifies the slices: the server
  // then hashes nothing on the read path, and where the connection allows, slices go from the
  // page cache to the socket without a copy (sendfile).
  const bool v2 = req->version == wire::kLayerwiseV2;
  // Only for a store that keeps files: looking for them costs a round of store operations
  // (counting the present prefix: over RADOS, a stat of every key) before the headers.
  const bool from_files = v2 && c.ex.sends_files() && store_->Capabilities().file_extents;
  auto read_prefix = co_await Blocking([&]() -> Result<HitPrefix> {
    // Read into memory, the header reads find where the prefix ends themselves: counting first
    // would be one more round of store operations (over RADOS, a stat of every key named).
    size_t present = names->size();
    if (from_files) {
      OC_ASSIGN_OR_RETURN(present, store_->CountPresentPrefix(*names));
      OC_ASSIGN_OR_RETURN(std::optional<HitPrefix> p,
                          ReadHitPrefixFromFiles(*store_, *names, present, *req, layout));
      if (p) {
        // The first layer only, cheap (16 pages a chunk): the rest once it is sent.
        ReadAheadFiles(*p, req->first, req->first + 1, layout.LayerSliceBytes());
        return std::move(*p);
      }
    }
    return ReadHitPrefix(*store_, *names, present, *req, layout);
  });
  if (!read_prefix) co_return std::unexpected(FromStatus(read_prefix.error()));
  // Shared with the read-ahead on the store pool (SendFramesFromFiles).
  const auto prefix = std::make_shared<const HitPrefix>(std::move(*read_prefix));
  const uint32_t hits = static_cast<uint32_t>(prefix->headers.size());
  const uint64_t slice = layout.LayerSliceBytes();
  metrics_->store_hits += hits;
  metrics_->store_misses += req->keys.size() - hits;

  // Per layer: the frame header, the payload, the trailer. Sent from files, the payload is one
  // sendfile per slice. Else (v1, TLS, stores without files) a window at a time (WindowPlan):
  // the store reads the next window while this one is sent, two windows per response at most.
  // Windows only for copied hits (a response with none allocates nothing), within the budget;
  // when it cannot lend two windows of the configured size, the windows kept idle between
  // responses are dropped first (window_buffers.h), then windows of half of it, a quarter, ...
  // down to kSmallWindow, so that many responses still fit where a few large ones would.
  const bool send_files = !prefix->readers.empty();
  WindowPlan plan(req->first, req->last, hits, slice, options_.layerwise_window_bytes);
  MemoryBudget::Lease lease = memory_.NewLease();
  if (hits > 0 && !send_files) {
    const uint64_t smallest = std::min<uint64_t>(options_.layerwise_window_bytes,
                                                 std::max<uint64_t>(kSmallWindow, slice));
    bool dropped_kept = false;  // once: others may keep windows again meanwhile
    for (uint64_t bound = options_.layerwise_window_bytes;
         !lease.GrowTo(2 * plan.WindowBytes(slice));) {
      if (!dropped_kept && (dropped_kept = windows_->DropAll())) continue;
      if (bound == smallest) co_return MemoryBudgetExhausted();
      bound = std::max(bound / 2, smallest);
      plan = WindowPlan(req->first, req->last, hits, slice, bound);
    }
  }

  ByteWriter head;
  wire::PutResponseHeader({.version = req->version,
                           .hits = hits,
                           .first_layer = req->first,
                           .layer_count = req->last - req->first,
                           .slice_bytes = slice,
                           .keys = static_cast<uint32_t>(req->keys.size())},
                          &head);
  Headers h{{"Content-Type", "application/x-objectcache-layers"},
            {"x-amz-request-id", c.request_id},
            {"x-objectcache-hits", std::to_string(hits)}};
  if (!(co_await c.ex.BeginResponse(200, std::move(h), std::nullopt)).ok())
    co_return S3Result<void>();
  if (!(co_await c.ex.WriteBody(AsBytes(head.str()))).ok()) co_return S3Result<void>();
  const uint64_t payload = uint64_t{hits} * slice * (req->last - req->first);
  // The first layer of the range is what the requester waits for before it can compute.
  PacedTransfer paced(&pacer_, payload,
                      req->compute_seconds_per_layer > 0
                          ? static_cast<double>(hits * slice) / req->compute_seconds_per_layer
                          : 0,
                      uint64_t{hits} * slice);

  const FrameSource source{.req = *req, .names = names, .prefix = prefix, .slice = slice, .v2 = v2};
  Status failure;
  const bool sent =
      send_files ? co_await SendFramesFromFiles(c.ex, pool_, source, paced)
                 : co_await SendFramesCopied(c.ex, *store_, pool_, windows_, std::move(lease),
                                             source, plan, paced, &failure);
  if (!sent) co_return S3Result<void>();
  // With no hits every frame is empty.
  for (uint32_t layer = req->first; hits == 0 && layer < req->last; ++layer) {
    ByteWriter frame;
    wire::PutFrameHeader({.layer = layer}, &frame);
    wire::PutFrameTrailer({.checksum = v2 ? 0 : Xxh3(nullptr, 0)}, &frame);
    if (!(co_await c.ex.WriteBody(AsBytes(frame.str()))).ok()) co_return S3Result<void>();
  }
  if (!failure.ok()) {
    ByteWriter err;
    wire::PutErrorRecord(static_cast<uint32_t>(failure.code()), failure.ToString(), &err);
    (void)co_await c.ex.WriteBody(AsBytes(err.str()));
  }
  (void)co_await c.ex.EndResponse();
  co_return S3Result<void>();
}

}  // namespace objectcache::server
