// BeastHttpExchange: the HttpExchange of one request on a Beast connection, plain TCP or TLS.
// It reads the body through the connection's parser and writes the response to its stream,
// each under the I/O timeout; on plain TCP it can send file pieces by sendfile(2). Used by
// HttpServer (http_server.cc) only; a template over the stream type.
#pragma once

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <sys/sendfile.h>
#include <sys/socket.h>

#include "objectcache/status.h"
#include "server/http_exchange.h"
#include "server/http_server.h"  // HttpLimits
#include "server/log.h"
#include "server/metrics.h"
#include "server/object_attributes.h"  // HttpTime

namespace objectcache::server {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace beast_exchange_detail {

// The Date header's value, formatted once a second per worker thread (every response has one).
inline const std::string& HttpDate() {
  thread_local std::time_t formatted_at = -1;
  thread_local std::string date;
  const std::time_t t = std::time(nullptr);
  if (t != formatted_at) {
    date = HttpTime(t);
    formatted_at = t;
  }
  return date;
}

inline Status FromError(const beast::error_code& ec, const char* what) {
  if (ec == beast::error::timeout) {
    return Status(StatusCode::kDeadlineExceeded, std::string(what) + ": timed out");
  }
  if (ec == http::error::body_limit) {
    return ResourceExhaustedError(std::string(what) + ": body exceeds the limit");
  }
  if (ec == http::error::buffer_overflow) {  // the connection's read buffer (http_server.cc)
    return InvalidArgumentError(std::string(what) +
                                ": a chunk-size line or the trailer section is too long");
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

}  // namespace beast_exchange_detail

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
    co_return beast_exchange_detail::FromError(ec, "reading the request body");
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
  return beast_exchange_detail::FromError(ec, what);
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
  h.set(http::field::date, beast_exchange_detail::HttpDate());
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
  beast_exchange_detail::ChunkSizeLine size_line(streamed_->chunked() ? total : 0);
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
    const beast_exchange_detail::ChunkSizeLine size_line(total);
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

}  // namespace objectcache::server
