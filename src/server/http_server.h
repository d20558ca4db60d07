// The HTTP/1.1 front end: Boost.Beast over Asio, C++20 coroutines.
//
// Threading (Envoy's model, Ceph RGW's Beast frontend): `workers` threads, each with its own
// io_context and its own listening socket on the same port (SO_REUSEPORT: the kernel spreads
// connections); a connection lives on one worker for its whole life. Blocking calls (the store)
// never run on a worker: handlers hop to their bounded thread pool with RunBlocking and back.
//
// With TLS certificates (TlsCertificates, reloadable) every connection is HTTPS: the handshake
// must finish within the header timeout; then the connection is served as a plain one is.
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
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "objectcache/status.h"
#include "server/http_exchange.h"
#include "server/metrics.h"

namespace objectcache::server {

struct HttpLimits {
  size_t header_bytes = 16 << 10;
  uint64_t body_bytes = 5ull << 30;         // the largest single PUT (S3: 5 GiB)
  std::chrono::seconds header_timeout{30};  // from the first byte to the end of the header
  std::chrono::seconds io_timeout{60};      // any body read or write that makes no progress
  std::chrono::seconds idle_timeout{60};    // a keep-alive connection with no request
  size_t max_connections = 4096;
};

// The server's certificate chain and key, reloadable while serving: each new connection takes
// the ones in force when it is accepted. Thread-safe.
class TlsCertificates {
 public:
  // InvalidArgument naming the file when either is unreadable or they do not match.
  static Result<std::unique_ptr<TlsCertificates>> Load(std::string cert_file, std::string key_file);
  // Reads both files again; on an error the certificate in force stays.
  Status Reload();
  std::shared_ptr<asio::ssl::context> Current() const;

 private:
  TlsCertificates(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}
  const std::string cert_file_, key_file_;
  mutable std::mutex mu_;
  std::shared_ptr<asio::ssl::context> current_;  // guarded by mu_
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;  // 0: any free port (see HttpServer::port)
  unsigned workers = 2;
  HttpLimits limits;
  std::chrono::seconds shutdown_grace{10};
  TlsCertificates* tls = nullptr;  // set: HTTPS only; must outlive the server
  // Plain TCP responses send file bytes with sendfile(2) (HttpExchange::sends_files); off, they
  // are read and written as over TLS (to compare the two: `bench path`).
  bool send_files = true;
};

class HttpServer {
 public:
  // Binds and starts serving. `handler` and `metrics` must outlive the server.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   RequestHandler* handler, ServerMetrics* metrics);
  ~HttpServer();

  uint16_t port() const { return port_; }

  // Graceful stop; returns when every worker has exited and the handler is quiesced
  // (RequestHandler::Quiesce).
  void Stop();

 private:
  struct Worker;
  HttpServer() = default;
  asio::awaitable<void> Accept(Worker* w);
  asio::awaitable<void> Serve(Worker* w, asio::ip::tcp::socket socket);
  // The requests of one connection, plain or TLS, until it closes or the server stops.
  template <typename Stream>
  asio::awaitable<void> ServeRequests(Worker* w, Stream& stream);
  // Out of file descriptors: accepts what waits on `w`'s listening socket with its reserve
  // descriptor, answers each 503 ServiceUnavailable and closes it. Returns how many.
  uint64_t ShedWaitingConnections(Worker* w);

  HttpServerOptions options_;
  RequestHandler* handler_ = nullptr;
  std::string shed_response_;  // the whole 503 ShedWaitingConnections sends
  ServerMetrics* metrics_ = nullptr;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
};

// Runs fn() on `pool` and resumes the calling coroutine on its own executor with the result.
// Two posts and no coroutine frame: the cheapest hop Asio 1.74 offers. An exception fn throws
// (std::bad_alloc) is rethrown in the coroutine, where the server ends that one request; left in
// the pool's thread it would end the process.
template <typename F>
auto RunBlocking(asio::thread_pool& pool, F fn) {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_default_constructible_v<R>, "the value handed over beside an exception");
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::exception_ptr, R)>(
      [&pool](auto handler, F work) {
        auto home = asio::get_associated_executor(handler);
        asio::post(pool, [handler = std::move(handler), work = std::move(work), home]() mutable {
          std::exception_ptr thrown;
          R result{};
          try {
            result = work();
          } catch (...) {
            thrown = std::current_exception();
          }
          asio::post(home,
                     [handler = std::move(handler), thrown, result = std::move(result)]() mutable {
                       std::move(handler)(thrown, std::move(result));
                     });
        });
      },
      asio::use_awaitable, std::move(fn));
}

}  // namespace objectcache::server
