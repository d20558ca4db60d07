// The HTTP/1.1 front end: Boost.Beast over Asio, C++20 coroutines.
//
// Threading (Envoy's model, Ceph RGW's Beast frontend): `workers` threads, each with its own
// io_context and its own listening socket on the same port (SO_REUSEPORT: the kernel spreads
// connections); a connection lives on one worker for its whole life. Blocking calls (the store)
// never run on a worker: handlers hop to their bounded thread pool with RunBlocking and back.
//
// Each request is handed to a RequestHandler as an HttpExchange, through which the handler
// streams the request body in and the response out, so no object has to fit in memory.
// Limits: header size, body size, and timeouts for a complete header, each body read or write,
// and idle keep-alive connections. A malformed request gets a 400 and the connection closes.
//
// Stop() is graceful: listening stops, idle connections close, requests in flight finish
// (bounded by the shutdown grace), then the workers exit.
#pragma once

// Before Boost.Asio 1.74's awaitable.hpp, which uses std::exchange without including it.
#include <utility>

#include <atomic>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "objectcache/status.h"
#include "server/metrics.h"

namespace objectcache::s3 {}

namespace objectcache::server {

// The S3 protocol pieces (SigV4, errors, XML, request parsing) live in src/s3, shared with the
// client; the server uses them unqualified.
using namespace ::objectcache::s3;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct HttpLimits {
  size_t header_bytes = 16 << 10;
  uint64_t body_bytes = 5ull << 30;         // the largest single PUT (S3: 5 GiB)
  std::chrono::seconds header_timeout{30};  // from the first byte to the end of the header
  std::chrono::seconds io_timeout{60};      // any body read or write that makes no progress
  std::chrono::seconds idle_timeout{60};    // a keep-alive connection with no request
  size_t max_connections = 4096;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;  // 0: any free port (see HttpServer::port)
  unsigned workers = 2;
  HttpLimits limits;
  std::chrono::seconds shutdown_grace{10};
};

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

// One request and its response. Owned by the connection; valid during RequestHandler::Handle.
class HttpExchange {
 public:
  HttpExchange(beast::tcp_stream& stream, beast::flat_buffer& buffer,
               http::request_parser<http::buffer_body>& parser, const HttpLimits& limits,
               ServerMetrics* metrics);
  ~HttpExchange();

  const http::request_header<>& request() const { return parser_.get(); }
  // Header names lowercased, in the order received.
  Headers RequestHeaders() const;
  std::optional<uint64_t> ContentLength() const;

  // Reads up to dest.size() bytes of the body; 0 at its end.
  asio::awaitable<Result<size_t>> ReadBody(std::span<std::byte> dest);
  bool body_done() const { return parser_.is_done(); }

  // A whole response with a small body.
  asio::awaitable<Status> Respond(unsigned status, Headers headers, std::string body);
  // A header-only response announcing `content_length` (HEAD).
  asio::awaitable<Status> RespondHeaderOnly(unsigned status, Headers headers,
                                            uint64_t content_length);
  // A streamed response: the header, then body pieces, then the end. Without a content length
  // the body goes out with chunked transfer encoding.
  asio::awaitable<Status> BeginResponse(unsigned status, Headers headers,
                                        std::optional<uint64_t> content_length);
  // Both fail with Internal (and close the connection) when no BeginResponse preceded them.
  asio::awaitable<Status> WriteBody(std::span<const std::byte> bytes);
  asio::awaitable<Status> EndResponse();

  bool responded() const { return responded_; }
  // After the response: may the connection carry another request?
  bool reusable() const;
  // The handler may ask to close the connection after the response.
  void CloseAfterResponse() { close_ = true; }

 private:
  void PrepareHeader(http::response_header<>& h, unsigned status, Headers& headers);
  asio::awaitable<Status> SendContinueIfExpected();
  bool ExpectsContinue() const;
  // The Status of a finished read or write; marks the exchange failed on an error.
  Status Check(beast::error_code ec, const char* what);
  Status NotStarted(const char* what);

  beast::tcp_stream& stream_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  const HttpLimits& limits_;
  ServerMetrics* metrics_;
  bool continue_sent_ = false;  // a 100 Continue went out
  bool responded_ = false;
  bool close_ = false;
  bool failed_ = false;
  std::unique_ptr<http::response<http::buffer_body>> streamed_;
  std::unique_ptr<http::response_serializer<http::buffer_body>> serializer_;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Must respond (unless the connection failed). Runs on a worker thread.
  virtual asio::awaitable<void> Handle(HttpExchange& exchange) = 0;
};

class HttpServer {
 public:
  // Binds and starts serving. `handler` and `metrics` must outlive the server.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   RequestHandler* handler, ServerMetrics* metrics);
  ~HttpServer();

  uint16_t port() const { return port_; }

  // Graceful stop; returns when every worker has exited.
  void Stop();

 private:
  struct Worker;
  HttpServer() = default;
  asio::awaitable<void> Accept(Worker* w);
  asio::awaitable<void> Serve(Worker* w, asio::ip::tcp::socket socket);
  // Out of file descriptors: accepts what waits on `w`'s listening socket with its reserve
  // descriptor, answers each 503 ServiceUnavailable and closes it. Returns how many.
  static uint64_t ShedWaitingConnections(Worker* w);

  HttpServerOptions options_;
  RequestHandler* handler_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
};

// Runs fn() on `pool` and resumes the calling coroutine on its own executor with the result.
// Two posts and no coroutine frame: the cheapest hop Asio 1.74 offers.
template <typename F>
auto RunBlocking(asio::thread_pool& pool, F fn) {
  using R = std::invoke_result_t<F&>;
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
      [&pool](auto handler, F work) {
        auto home = asio::get_associated_executor(handler);
        asio::post(pool, [handler = std::move(handler), work = std::move(work), home]() mutable {
          R result = work();
          asio::post(home, [handler = std::move(handler), result = std::move(result)]() mutable {
            std::move(handler)(std::move(result));
          });
        });
      },
      asio::use_awaitable, std::move(fn));
}

}  // namespace objectcache::server
