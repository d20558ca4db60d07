#include "server/http_server.h"

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <cstring>
#include <list>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "s3/tls.h"
#include "s3/tls_stream.h"
#include "server/beast_http_exchange.h"
#include "server/log.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kReadBufferBytes = 64 << 10;

}  // namespace

// ---- TlsCertificates ----------------------------------------------------------------------

Result<std::unique_ptr<TlsCertificates>> TlsCertificates::Load(std::string cert_file,
                                                               std::string key_file) {
  std::unique_ptr<TlsCertificates> tls(
      new TlsCertificates(std::move(cert_file), std::move(key_file)));
  OC_RETURN_IF_ERROR(tls->Reload());
  return tls;
}

Status TlsCertificates::Reload() {
  OC_ASSIGN_OR_RETURN(std::shared_ptr<asio::ssl::context> context,
                      ServerTlsContext(cert_file_, key_file_));
  std::lock_guard lock(mu_);
  current_ = std::move(context);
  return Status();
}

std::shared_ptr<asio::ssl::context> TlsCertificates::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

// ---- HttpServer ------------------------------------------------------------------------------

struct Session {
  beast::tcp_stream* stream;
  bool idle = true;
};

struct HttpServer::Worker {
  asio::io_context ioc{1};
  std::optional<tcp::acceptor> acceptor;
  std::list<Session*> sessions;  // touched only on this worker's thread
  std::thread thread;
  // A descriptor held in reserve: when the process runs out, it is let go for a moment to
  // accept the waiting connections and answer them 503 instead of leaving them hanging.
  int reserve_fd = -1;
  std::chrono::steady_clock::time_point last_fd_warning{};
  uint64_t shed_since_warning = 0;
  ~Worker() {
    if (reserve_fd >= 0) ::close(reserve_fd);
  }
};

uint64_t HttpServer::ShedWaitingConnections(Worker* w) {
  const std::string& response = shed_response_;
  if (w->reserve_fd >= 0) ::close(w->reserve_fd);
  w->reserve_fd = -1;
  uint64_t shed = 0;
  for (; shed < 256; ++shed) {
    const int fd =
        ::accept4(w->acceptor->native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    (void)::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
  w->reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return shed;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      RequestHandler* handler,
                                                      ServerMetrics* metrics) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  // sendfile(2) has no MSG_NOSIGNAL: a peer gone mid-response must be an EPIPE, not the end of
  // the process (as nginx does, for the same reason).
  if (options.send_files) ::signal(SIGPIPE, SIG_IGN);
  server->options_ = options;
  server->handler_ = handler;
  {
    const TransportErrorResponse shed = handler->DescribeTransportFailure(
        TransportFailure::kOutOfDescriptors, "the server is out of file descriptors; retry");
    const auto reason = http::obsolete_reason(static_cast<http::status>(shed.status));
    server->shed_response_ = "HTTP/1.1 " + std::to_string(shed.status) + " " +
                             std::string(reason.data(), reason.size()) +
                             "\r\nServer: ObjectCache\r\nContent-Type: " + shed.content_type +
                             "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
                             std::to_string(shed.body.size()) + "\r\n\r\n" + shed.body;
  }
  server->metrics_ = metrics;
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) {
    return InvalidArgumentError("listen address '" + options.host +
                                "' is not an IP address (127.0.0.1, ::1 in brackets, 0.0.0.0)");
  }
  uint16_t port = options.port;
  const unsigned workers = std::max(1u, options.workers);
  for (unsigned i = 0; i < workers; ++i) {
    auto w = std::make_unique<Worker>();
    tcp::acceptor& a = w->acceptor.emplace(w->ioc);
    tcp::endpoint ep(address, port);
    a.open(ep.protocol(), ec);
    if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) {
      int one = 1;
      if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        return ErrnoError("setting SO_REUSEPORT", errno);
      }
    }
    if (!ec) a.bind(ep, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    // Non-blocking, so that shedding connections when out of descriptors never waits.
    if (!ec) a.non_blocking(true, ec);
    w->reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (ec) {
      return UnavailableError("listening on " + options.host + ":" + std::to_string(port) + ": " +
                              ec.message());
    }
    port = a.local_endpoint().port();  // the others join the port the first one got
    server->workers_.push_back(std::move(w));
  }
  server->port_ = port;
  for (auto& w : server->workers_) {
    Worker* wp = w.get();
    asio::co_spawn(wp->ioc, server->Accept(wp), asio::detached);
    wp->thread = std::thread([wp] { wp->ioc.run(); });
  }
  return server;
}

HttpServer::~HttpServer() { Stop(); }

asio::awaitable<void> HttpServer::Accept(Worker* w) {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket =
        co_await w->acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) co_return;
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE ||
          ec == asio::error::no_memory || ec == asio::error::no_buffer_space) {
        // Out of descriptors: the waiting connection would make accept fail again at once (a
        // spin). Answer what waits with 503, say so (once a second at most), back off briefly.
        const uint64_t shed = ShedWaitingConnections(w);
        metrics_->rejected_requests += shed;
        w->shed_since_warning += shed;
        const auto now = std::chrono::steady_clock::now();
        if (now - w->last_fd_warning > std::chrono::seconds(1)) {
          LogWarn("accepting connections: " + ec.message() + "; answered " +
                  std::to_string(w->shed_since_warning) +
                  " connection(s) 503 (raise the open-file limit or lower --max-connections)");
          w->last_fd_warning = now;
          w->shed_since_warning = 0;
        }
        asio::steady_timer backoff(w->ioc, std::chrono::milliseconds(50));
        co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      continue;
    }
    // Counted here, not in Serve: Serve starts later, and the next accept must see this one.
    if (static_cast<size_t>(metrics_->open_connections.fetch_add(1)) >=
        options_.limits.max_connections) {
      metrics_->open_connections--;
      metrics_->rejected_requests++;
      socket.close(ec);
      continue;
    }
    asio::co_spawn(w->ioc, Serve(w, std::move(socket)), [](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          LogError(std::string("connection failed: ") + ex.what());
        }
      }
    });
  }
}

asio::awaitable<void> HttpServer::Serve(Worker* w, tcp::socket socket) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  metrics_->connections_total++;
  if (!options_.tls) {
    beast::tcp_stream stream(std::move(socket));
    co_await ServeRequests(w, stream);
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.close();
  } else {
    // The certificate in force when the connection came; a reload serves the next ones.
    const std::shared_ptr<asio::ssl::context> context = options_.tls->Current();
    s3::TlsStream stream(beast::tcp_stream(std::move(socket)), *context);
    beast::get_lowest_layer(stream).expires_after(options_.limits.header_timeout);
    co_await stream.async_handshake(asio::ssl::stream_base::server,
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      metrics_->tls_handshake_failures++;
      LogDebug("TLS handshake: " + ec.message());
    } else {
      co_await ServeRequests(w, stream);
    }
    // No close_notify: every response is framed by its length or its chunking, so a client
    // cannot mistake a cut connection for a whole response, and waiting for the peer's own
    // close_notify would hold the connection open until a timeout.
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
    beast::get_lowest_layer(stream).close();
  }
  metrics_->open_connections--;
}

template <typename Stream>
asio::awaitable<void> HttpServer::ServeRequests(Worker* w, Stream& stream) {
  beast::error_code ec;
  beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
  Session session{&lowest, true};
  auto registered = w->sessions.insert(w->sessions.end(), &session);
  const HttpLimits& limits = options_.limits;
  // Beast reads at most the buffer's spare capacity per system call (512 bytes when it has
  // none): give it room, or a 2 MiB body takes 4000 reads. And a bound: Beast keeps a chunk's
  // size line and the trailer section whole in this buffer until their CRLF arrives, and neither
  // counts against the header or the body limit, so without one a client's 100 MB chunk
  // extension or trailer section was held in memory (the request then fails, 400 IncompleteBody).
  beast::flat_buffer buffer(kReadBufferBytes + limits.header_bytes);
  buffer.reserve(kReadBufferBytes);
  while (!stopping_) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.header_bytes));
    parser.body_limit(limits.body_bytes);
    session.idle = true;
    if (buffer.size() == 0) {
      // Idle keep-alive: wait for the first bytes of the next request, through the stream so
      // its timer bounds the wait (a wait on the raw socket would not be).
      lowest.expires_after(limits.idle_timeout);
      const size_t n = co_await stream.async_read_some(
          buffer.prepare(kReadBufferBytes), asio::redirect_error(asio::use_awaitable, ec));
      buffer.commit(n);
      if (ec || stopping_) break;
    }
    session.idle = false;
    lowest.expires_after(limits.header_timeout);
    co_await http::async_read_header(stream, buffer, parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
          ec == asio::ssl::error::stream_truncated) {
        break;
      }
      metrics_->rejected_requests++;
      if (ec != beast::error::timeout) {
        // Malformed or oversized header: answer once, then close.
        TransportFailure failure = TransportFailure::kMalformedRequest;
        std::string detail = "malformed HTTP request: " + ec.message();
        if (ec == http::error::header_limit) {
          failure = TransportFailure::kHeaderTooLarge;
          detail = "request header exceeds " + std::to_string(limits.header_bytes) + " bytes";
        } else if (ec == http::error::body_limit) {
          failure = TransportFailure::kBodyTooLarge;
          detail = "request body exceeds " + std::to_string(limits.body_bytes) + " bytes";
        }
        TransportErrorResponse err = handler_->DescribeTransportFailure(failure, detail);
        http::response<http::string_body> res{static_cast<http::status>(err.status), 11};
        res.set(http::field::server, "ObjectCache");
        res.set(http::field::content_type, err.content_type);
        res.body() = std::move(err.body);
        res.keep_alive(false);
        res.prepare_payload();
        lowest.expires_after(limits.io_timeout);
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      }
      break;
    }
    BeastHttpExchange<Stream> exchange(stream, buffer, parser, limits, metrics_,
                                       options_.send_files);
    bool failed = false;
    try {
      co_await handler_->Handle(exchange);
    } catch (const std::exception& ex) {
      // A bug, not a client's fault: log it, drop this connection, keep serving the others.
      LogError(std::string("request failed: ") + ex.what());
      failed = true;
    }
    if (failed || !exchange.responded() || !exchange.reusable()) break;
  }
  w->sessions.erase(registered);
}

void HttpServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  for (auto& w : workers_) {
    Worker* wp = w.get();
    asio::post(wp->ioc, [wp] {
      beast::error_code ec;
      wp->acceptor->close(ec);
      for (Session* s : wp->sessions) {
        if (s->idle) s->stream->socket().cancel(ec);
      }
    });
  }
  // Requests in flight finish; then the workers end.
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
  while (metrics_->open_connections.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& w : workers_) w->ioc.stop();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  // Coroutines of requests cut off by the grace still wait in the stopped loops, some on store
  // calls the handler runs elsewhere: those finish and post into the loops, which must still be
  // there (they go with this server, after this).
  handler_->Quiesce();
}

}  // namespace objectcache::server
