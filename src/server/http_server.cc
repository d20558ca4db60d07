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
#include <ctime>
#include <list>
#include <type_traits>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "s3/s3_error.h"
#include "s3/tls.h"
#include "s3/tls_stream.h"
#include "server/log.h"
#include "server/object_attributes.h"  // HttpTime

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kReadBufferBytes = 64 << 10;

// The Date header's value, formatted once a second per worker thread (every response has one).
const std::string& HttpDate() {
  thread_local std::time_t formatted_at = -1;
  thread_local std::string date;
  const std::time_t t = std::time(nullptr);
  if (t != formatted_at) {
    date = HttpTime(t);
    formatted_at = t;
  }
  return date;
}

Status FromError(const beast::error_code& ec, const char* what) {
  if (ec == beast::error::timeout) {
    return Status(StatusCode::kDeadlineExceeded, std::string(what) + ": timed out");
  }
  if (ec == http::error::body_limit) {
    return ResourceExhaustedError(std::string(what) + ": body exceeds the limit");
  }
  return UnavailableError(std::string(what) + ": " + ec.message());
}

// The line that opens a chunk of `bytes` in a chunked body ("1f400\r\n"); empty for 0.
class ChunkSizeLine {
 public:
  explicit ChunkSizeLine(uint64_t bytes) {
    if (bytes > 0) {
      len_ = static_cast<size_t>(
          std::snprintf(text_, sizeof(text_), "%llx\r\n", static_cast<unsigned long long>(bytes)));
    }
  }
  std::string_view text() const { return {text_, len_}; }

 private:
  char text_[24] = {};  // 16 hex digits and CRLF at most
  size_t len_ = 0;
};

}  // namespace

// ---- BeastHttpExchange -----------------------------------------------------------------------

// The exchange on a connection: reads the body through the connection's parser and writes the
// response to its stream, each under the I/O timeout.
template <typename Stream>
class BeastHttpExchange final : public HttpExchange {
 public:
  BeastHttpExchange(Stream& stream, beast::flat_buffer& buffer,
                    http::request_parser<http::buffer_body>& parser, const HttpLimits& limits,
                    ServerMetrics* metrics, bool send_files)
      : stream_(stream),
        buffer_(buffer),
        parser_(parser),
        limits_(limits),
        metrics_(metrics),
        send_files_(send_files && std::is_same_v<Stream, beast::tcp_stream>) {}

  std::string_view method() const override {
    const auto m = parser_.get().method_string();
    return {m.data(), m.size()};
  }
  std::string_view target() const override {
    const auto t = parser_.get().target();
    return {t.data(), t.size()};
  }
  Headers RequestHeaders() const override;
  std::optional<uint64_t> ContentLength() const override;
  asio::awaitable<Result<size_t>> ReadBody(std::span<std::byte> dest) override;
  bool body_done() const override { return parser_.is_done(); }
  asio::awaitable<Status> Respond(unsigned status, Headers headers, std::string body) override;
  asio::awaitable<Status> RespondHeaderOnly(unsigned status, Headers headers,
                                            uint64_t content_length) override;
  asio::awaitable<Status> BeginResponse(unsigned status, Headers headers,
                                        std::optional<uint64_t> content_length) override;
  asio::awaitable<Status> WriteBody(std::span<const std::byte> bytes) override;
  asio::awaitable<Status> EndResponse() override;
  asio::awaitable<Status> WriteBodyPieces(
      std::span<const std::span<const std::byte>> pieces) override;
  void CloseAfterResponse() override { close_ = true; }
  bool sends_files() const override { return send_files_; }
  asio::awaitable<Status> RespondWithFile(unsigned status, Headers headers,
                                          FilePiece piece) override;
  asio::awaitable<Status> WriteBodyFiles(std::span<const FilePiece> pieces) override;

  bool responded() const { return responded_; }
  // After the response: may the connection carry another request?
  bool reusable() const;

 private:
  void PrepareHeader(http::response_header<>& h, unsigned status, Headers& headers);
  asio::awaitable<Status> SendContinueIfExpected();
  bool ExpectsContinue() const;
  // The Status of a finished read or write; marks the exchange failed on an error.
  Status Check(beast::error_code ec, const char* what);
  Status NotStarted(const char* what);
  // sendfile(2) of one piece to the socket, waiting for room as the socket asks.
  asio::awaitable<Status> SendFile(const FilePiece& piece);
  // send(2) of `bytes` straight to the socket, past the serializer, with `flags` (MSG_MORE:
  // more follows at once), waiting for room the same way.
  asio::awaitable<Status> SendBytes(std::string_view bytes, int flags);
  // Until the socket has room again, within the I/O timeout.
  asio::awaitable<Status> WaitWritable();

  // The TCP stream under `stream_`, which holds the timeouts.
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  Stream& stream_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  const HttpLimits& limits_;
  ServerMetrics* metrics_;
  const bool send_files_;       // plain TCP, and the server sends files
  bool continue_sent_ = false;  // a 100 Continue went out
  bool responded_ = false;
  bool close_ = false;
  bool failed_ = false;
  std::unique_ptr<http::response<http::buffer_body>> streamed_;
  std::unique_ptr<http::response_serializer<http::buffer_body>> serializer_;
};

template <typename Stream>
Headers BeastHttpExchange<Stream>::RequestHeaders() const {
  Headers out;
  for (const auto& f : parser_.get()) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.emplace_back(std::move(name), std::string(f.value()));
  }
  return out;
}

template <typename Stream>
std::optional<uint64_t> BeastHttpExchange<Stream>::ContentLength() const {
  auto len = parser_.content_length();
  if (len) return *len;
  return std::nullopt;
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::SendContinueIfExpected() {
  if (continue_sent_ || !ExpectsContinue()) co_return Status();
  continue_sent_ = true;
  http::response<http::empty_body> res{http::status::continue_, 11};
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return Check(ec, "sending 100 Continue");
}

template <typename Stream>
asio::awaitable<Result<size_t>> BeastHttpExchange<Stream>::ReadBody(std::span<std::byte> dest) {
  if (parser_.is_done() || dest.empty()) co_return size_t{0};
  if (Status s = co_await SendContinueIfExpected(); !s.ok()) co_return s;
  auto& body = parser_.get().body();
  body.data = dest.data();
  body.size = dest.size();
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_read(stream_, buffer_, parser_,
                            asio::redirect_error(asio::use_awaitable, ec));
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    failed_ = true;
    co_return FromError(ec, "reading the request body");
  }
  const size_t n = dest.size() - body.size;
  metrics_->bytes_received += n;
  co_return n;
}

template <typename Stream>
Status BeastHttpExchange<Stream>::Check(beast::error_code ec, const char* what) {
  if (ec == http::error::need_buffer) ec = {};  // a buffer body asking for more: not an error
  if (!ec) return Status();
  failed_ = true;
  LogDebug(std::string(what) + ": " + ec.message());
  return FromError(ec, what);
}

template <typename Stream>
Status BeastHttpExchange<Stream>::NotStarted(const char* what) {
  // A handler bug, never a client's doing: fail this exchange (the connection closes), keep the
  // process.
  failed_ = true;
  LogError(std::string(what) + " that was never begun");
  return InternalError(std::string(what) + " that was never begun");
}

template <typename Stream>
bool BeastHttpExchange<Stream>::ExpectsContinue() const {
  auto expect = parser_.get().find(http::field::expect);
  return expect != parser_.get().end() && beast::iequals(expect->value(), "100-continue");
}

template <typename Stream>
bool BeastHttpExchange<Stream>::reusable() const {
  // A final response to a request expecting 100-continue that never got one ends the
  // connection: botocore, having read that response in place of a 100, keeps its status line
  // for the next request on the connection and misreads the next response (a 60 s stall).
  if (ExpectsContinue() && !continue_sent_) return false;
  return !failed_ && !close_ && parser_.is_done() && parser_.get().keep_alive();
}

template <typename Stream>
void BeastHttpExchange<Stream>::PrepareHeader(http::response_header<>& h, unsigned status,
                                              Headers& headers) {
  h.version(11);
  h.result(status);
  h.set(http::field::server, "ObjectCache");
  h.set(http::field::date, HttpDate());
  for (auto& [k, v] : headers) h.insert(k, v);
  h.set(http::field::connection, reusable() ? "keep-alive" : "close");
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::Respond(unsigned status, Headers headers,
                                                           std::string body) {
  http::response<http::string_body> res;
  PrepareHeader(res.base(), status, headers);
  metrics_->bytes_sent += body.size();
  res.body() = std::move(body);
  res.prepare_payload();
  responded_ = true;
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return Check(ec, "writing the response");
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::RespondHeaderOnly(unsigned status,
                                                                     Headers headers,
                                                                     uint64_t content_length) {
  http::response<http::empty_body> res;
  PrepareHeader(res.base(), status, headers);
  if (status != 304) res.set(http::field::content_length, std::to_string(content_length));
  responded_ = true;
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  http::response_serializer<http::empty_body> sr(res);
  co_await http::async_write_header(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
  co_return Check(ec, "writing the response");
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::BeginResponse(
    unsigned status, Headers headers, std::optional<uint64_t> content_length) {
  streamed_ = std::make_unique<http::response<http::buffer_body>>();
  PrepareHeader(streamed_->base(), status, headers);
  if (content_length) {
    streamed_->content_length(*content_length);
  } else {
    streamed_->chunked(true);
  }
  streamed_->body().data = nullptr;
  streamed_->body().more = true;
  serializer_ = std::make_unique<http::response_serializer<http::buffer_body>>(*streamed_);
  responded_ = true;
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_write_header(stream_, *serializer_,
                                    asio::redirect_error(asio::use_awaitable, ec));
  co_return Check(ec, "writing the response header");
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::WriteBody(std::span<const std::byte> bytes) {
  if (!streamed_) co_return NotStarted("writing a response body");
  streamed_->body().data = const_cast<std::byte*>(bytes.data());
  streamed_->body().size = bytes.size();
  streamed_->body().more = true;
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_write(stream_, *serializer_, asio::redirect_error(asio::use_awaitable, ec));
  if (Status s = Check(ec, "writing the response body"); !s.ok()) co_return s;
  metrics_->bytes_sent += bytes.size();
  co_return Status();
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::WriteBodyPieces(
    std::span<const std::span<const std::byte>> pieces) {
  if (!streamed_) co_return NotStarted("writing a response body");
  uint64_t total = 0;
  for (std::span<const std::byte> p : pieces) total += p.size();
  if (total == 0) co_return Status();
  // Past the serializer, as WriteBodyFiles: one chunk of a chunked response, framed here, and
  // one gathering write of the pieces (through TLS too: the stream encrypts what it is given).
  ChunkSizeLine size_line(streamed_->chunked() ? total : 0);
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(pieces.size() + 2);
  buffers.emplace_back(size_line.text().data(), size_line.text().size());
  for (std::span<const std::byte> p : pieces) buffers.emplace_back(p.data(), p.size());
  if (streamed_->chunked()) buffers.emplace_back("\r\n", 2);
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await asio::async_write(stream_, buffers, asio::redirect_error(asio::use_awaitable, ec));
  if (Status s = Check(ec, "writing the response body"); !s.ok()) co_return s;
  metrics_->bytes_sent += total;
  co_return Status();
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::EndResponse() {
  if (!streamed_) co_return NotStarted("finishing a response");
  streamed_->body().data = nullptr;
  streamed_->body().size = 0;
  streamed_->body().more = false;
  beast::error_code ec;
  tcp().expires_after(limits_.io_timeout);
  co_await http::async_write(stream_, *serializer_, asio::redirect_error(asio::use_awaitable, ec));
  co_return Check(ec, "finishing the response");
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::SendFile(const FilePiece& piece) {
  tcp::socket& socket = tcp().socket();
  off_t offset = static_cast<off_t>(piece.offset);
  uint64_t left = piece.length;
  while (left > 0) {
    // The socket is non-blocking (Asio's): sendfile moves what fits and says EAGAIN when full.
    const ssize_t n = ::sendfile(socket.native_handle(), piece.fd, &offset,
                                 static_cast<size_t>(std::min<uint64_t>(left, 1u << 30)));
    if (n > 0) {
      left -= static_cast<uint64_t>(n);
      metrics_->bytes_sent += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) {
      // The file ends before the piece: cut the response short (the connection closes).
      failed_ = true;
      LogError("sending a file: it ended " + std::to_string(left) + " bytes early");
      co_return DataLossError("sending a file: it ended " + std::to_string(left) + " bytes early");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      failed_ = true;
      co_return UnavailableError(std::string("sending a file: ") + std::strerror(errno));
    }
    if (Status s = co_await WaitWritable(); !s.ok()) co_return s;
  }
  co_return Status();
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::SendBytes(std::string_view bytes, int flags) {
  const int fd = tcp().socket().native_handle();
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), flags | MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != EAGAIN) {
      failed_ = true;
      co_return UnavailableError(std::string("writing the response: ") +
                                 (n == 0 ? "nothing sent" : std::strerror(errno)));
    }
    if (Status s = co_await WaitWritable(); !s.ok()) co_return s;
  }
  co_return Status();
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::WaitWritable() {
  // The timer cancels the wait when it fires. Its handler may run after the wait ended (both
  // ready at once): `wait` says whether to act.
  tcp::socket& socket = tcp().socket();
  enum class Wait { kWaiting, kDone, kTimedOut };
  auto wait = std::make_shared<Wait>(Wait::kWaiting);
  asio::steady_timer timer(socket.get_executor());
  timer.expires_after(limits_.io_timeout);
  timer.async_wait([&socket, wait](beast::error_code tec) {
    if (tec || *wait != Wait::kWaiting) return;
    *wait = Wait::kTimedOut;
    beast::error_code ignored;
    socket.cancel(ignored);
  });
  beast::error_code ec;
  co_await socket.async_wait(tcp::socket::wait_write,
                             asio::redirect_error(asio::use_awaitable, ec));
  if (*wait == Wait::kTimedOut) ec = beast::error::timeout;
  *wait = Wait::kDone;
  co_return Check(ec, "writing the response");  // its header or its body
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::WriteBodyFiles(
    std::span<const FilePiece> pieces) {
  if (!send_files_) co_return InternalError("this exchange does not send files");
  if (!streamed_) co_return NotStarted("writing a response body");
  uint64_t total = 0;
  for (const FilePiece& p : pieces) total += p.length;
  if (total == 0) co_return Status();
  // Between the serializer's own writes it holds nothing back, so bytes written to the socket
  // here land in order; a chunked response gets this batch as one chunk, framed here.
  const bool chunked = streamed_->chunked();
  if (chunked) {
    const ChunkSizeLine size_line(total);
    if (Status s = co_await SendBytes(size_line.text(), MSG_MORE); !s.ok()) co_return s;
  }
  for (const FilePiece& p : pieces) {
    if (Status s = co_await SendFile(p); !s.ok()) co_return s;
  }
  if (chunked) co_return co_await SendBytes("\r\n", 0);
  co_return Status();
}

template <typename Stream>
asio::awaitable<Status> BeastHttpExchange<Stream>::RespondWithFile(unsigned status, Headers headers,
                                                                   FilePiece piece) {
  if (!send_files_) co_return InternalError("this exchange does not send files");
  // The header goes straight to the socket, flagged MSG_MORE: it waits for the file's bytes and
  // leaves with them, in full segments, and sendfile's last piece pushes them out. Sent alone
  // (TCP_NODELAY), the header would leave in a segment of its own and the peer would wake for
  // it before the body: on small objects, a second round of work at both ends for every
  // response. (Past Beast's serializer: a small GET's header costs less written out here.)
  http::response_header<> h;
  PrepareHeader(h, status, headers);
  h.set(http::field::content_length, std::to_string(piece.length));
  auto append = [](std::string& to, beast::string_view v) { to.append(v.data(), v.size()); };
  std::string text = "HTTP/1.1 " + std::to_string(status) + " ";
  append(text, h.reason());
  text += "\r\n";
  for (const auto& field : h) {
    append(text, field.name_string());
    text += ": ";
    append(text, field.value());
    text += "\r\n";
  }
  text += "\r\n";
  responded_ = true;
  if (Status s = co_await SendBytes(text, piece.length > 0 ? MSG_MORE : 0); !s.ok()) co_return s;
  co_return co_await SendFile(piece);
}

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
  static const std::string response = [] {
    const std::string body =
        MakeS3Error("ServiceUnavailable", "the server is out of file descriptors; retry")
            .ToXml("0");
    return "HTTP/1.1 503 Service Unavailable\r\nServer: ObjectCache\r\nContent-Type: "
           "application/xml\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
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
  server->metrics_ = metrics;
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) return InvalidArgumentError("listen address '" + options.host + "': " + ec.message());
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
  // Beast reads at most the buffer's spare capacity per system call (512 bytes when it has
  // none): give it room, or a 2 MiB body takes 4000 reads.
  beast::flat_buffer buffer;
  buffer.reserve(kReadBufferBytes);
  const HttpLimits& limits = options_.limits;
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
        S3Error err = MakeS3Error("InvalidRequest", "malformed HTTP request: " + ec.message());
        if (ec == http::error::header_limit) {
          err = MakeS3Error(
              "RequestHeaderSectionTooLarge",
              "request header exceeds " + std::to_string(limits.header_bytes) + " bytes");
        } else if (ec == http::error::body_limit) {
          err = MakeS3Error("EntityTooLarge",
                            "request body exceeds " + std::to_string(limits.body_bytes) + " bytes");
        }
        http::response<http::string_body> res{
            static_cast<http::status>(err.HttpStatus() == 403 ? 400 : err.HttpStatus()), 11};
        res.set(http::field::server, "ObjectCache");
        res.set(http::field::content_type, "application/xml");
        res.body() = err.ToXml("0");
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
