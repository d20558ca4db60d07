// One HTTP request and its response, as a request handler sees them: the interface every
// handler is written against (as Envoy's filters are written against envoy/http/filter.h), with
// two implementations: the Beast one on a connection (http_server.cc) and an in-memory one for
// tests (memory_exchange.h). The request body streams in and the response streams out, so no
// object has to fit in memory.
#pragma once

// Before Boost.Asio 1.74's awaitable.hpp, which uses std::exchange without including it.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::server {

namespace asio = boost::asio;

using Headers = std::vector<std::pair<std::string, std::string>>;

// A streaming buffer that is not zero-filled (it is always written before it is read): a
// request's 1 MiB buffer costs no memset on the hot path.
class IoBuffer {
 public:
  explicit IoBuffer(size_t size)
      : data_(std::make_unique_for_overwrite<std::byte[]>(size)), size_(size) {}
  std::span<std::byte> span() { return {data_.get(), size_}; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t size_;
};

// A byte range of an open file, to be sent as body bytes.
struct FilePiece {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Valid while the handler runs. Not thread-safe: one coroutine drives it.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual std::string_view method() const = 0;
  // The request target as sent: path and query, still percent-encoded.
  virtual std::string_view target() const = 0;
  // Header names lowercased, in the order received.
  virtual Headers RequestHeaders() const = 0;
  virtual std::optional<uint64_t> ContentLength() const = 0;

  // Reads up to dest.size() bytes of the body; 0 at its end.
  virtual asio::awaitable<Result<size_t>> ReadBody(std::span<std::byte> dest) = 0;
  virtual bool body_done() const = 0;

  // A whole response with a small body. REQUIRES: no response begun yet (as for the next two).
  virtual asio::awaitable<Status> Respond(unsigned status, Headers headers, std::string body) = 0;
  // A header-only response announcing `content_length` (HEAD).
  virtual asio::awaitable<Status> RespondHeaderOnly(unsigned status, Headers headers,
                                                    uint64_t content_length) = 0;
  // A streamed response: the header, then body pieces, then the end. Without a content length
  // the body goes out with chunked transfer encoding.
  virtual asio::awaitable<Status> BeginResponse(unsigned status, Headers headers,
                                                std::optional<uint64_t> content_length) = 0;
  // Both fail with Internal (and end the exchange) when no BeginResponse preceded them.
  virtual asio::awaitable<Status> WriteBody(std::span<const std::byte> bytes) = 0;
  virtual asio::awaitable<Status> EndResponse() = 0;
  // Writes the pieces in order as body bytes; a connection may gather them into one write (one
  // chunk of a chunked response). The default writes them one by one.
  virtual asio::awaitable<Status> WriteBodyPieces(
      std::span<const std::span<const std::byte>> pieces) {
    for (std::span<const std::byte> p : pieces) {
      if (Status s = co_await WriteBody(p); !s.ok()) co_return s;
    }
    co_return Status();
  }

  // Whether WriteBodyFiles can be used: on plain TCP it moves file bytes to the socket without
  // copying them through user space (sendfile(2)); over TLS it cannot, and handlers read the
  // bytes and WriteBody them instead (docs/decisions.md, "Slices go from the page cache to the
  // socket").
  virtual bool sends_files() const { return false; }
  // Writes the pieces in order as body bytes (one chunk of a chunked response). A file that
  // ends before its piece fails the exchange: the response is cut short, never padded.
  // REQUIRES: sends_files(), and BeginResponse before (else Internal, as for WriteBody).
  virtual asio::awaitable<Status> WriteBodyFiles(std::span<const FilePiece> pieces) {
    (void)pieces;
    co_return InternalError("this exchange does not send files");
  }

  // A whole response whose body is `piece` of a file. REQUIRES: sends_files(), and no response
  // begun yet. A connection may hold the header back to send it with the file's bytes.
  virtual asio::awaitable<Status> RespondWithFile(unsigned status, Headers headers,
                                                  FilePiece piece) {
    if (Status s = co_await BeginResponse(status, std::move(headers), piece.length); !s.ok()) {
      co_return s;
    }
    if (Status s = co_await WriteBodyFiles(std::span<const FilePiece>(&piece, 1)); !s.ok()) {
      co_return s;
    }
    co_return co_await EndResponse();
  }

  // The handler may ask to close the connection after the response.
  virtual void CloseAfterResponse() = 0;
};

// Why a server answers a connection itself, before any handler sees a request on it.
enum class TransportFailure {
  kMalformedRequest,  // the request line or a header could not be parsed (400)
  kHeaderTooLarge,    // the header section passed the server's limit (400)
  kBodyTooLarge,      // the declared body passed the server's limit (400)
  kOutOfDescriptors,  // the process has no file descriptor left for the connection (503)
};

// The HTTP status of each: 503 when the server is out of descriptors, else 400.
inline unsigned TransportFailureStatus(TransportFailure failure) {
  return failure == TransportFailure::kOutOfDescriptors ? 503u : 400u;
}

// A whole response the server writes on its own: status, Content-Type and body.
struct TransportErrorResponse {
  unsigned status = 400;
  std::string content_type;
  std::string body;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Must respond (unless the exchange failed).
  virtual asio::awaitable<void> Handle(HttpExchange& exchange) = 0;
  // The answer to a connection the server refuses itself (`detail` says why), in the handler's
  // protocol. The default is plain text.
  virtual TransportErrorResponse DescribeTransportFailure(TransportFailure failure,
                                                          const std::string& detail) const {
    return {.status = TransportFailureStatus(failure),
            .content_type = "text/plain",
            .body = detail + "\n"};
  }
  // Called by a server once it has stopped (none of its event loops runs again) and before it
  // destroys them: waits for the work the handler runs off the event loops (store calls on a
  // pool) to end, so that none posts its completion into an event loop being destroyed. A
  // quiesced handler serves no more requests.
  virtual void Quiesce() {}
};

}  // namespace objectcache::server
