#include "s3/s3_connection.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <optional>

#include <poll.h>

#include "s3/crypto.h"
#include "s3/s3_request.h"
#include "s3/sigv4.h"
#include "s3/socket_deadline.h"
#include "s3/tls.h"
#include "s3/tls_stream.h"

namespace objectcache::s3 {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

const std::string* S3Response::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

Result<S3Endpoint> S3Endpoint::Parse(std::string_view url) {
  S3Endpoint e;
  if (url.starts_with("https://")) {
    url.remove_prefix(8);
    e.tls = true;
  } else if (url.starts_with("http://")) {
    url.remove_prefix(7);
  } else if (url.find("://") != std::string_view::npos) {
    return InvalidArgumentError("endpoint '" + std::string(url) + "' is not http:// or https://");
  }
  while (url.ends_with("/")) url.remove_suffix(1);
  const size_t colon = url.rfind(':');
  if (colon == std::string_view::npos || url.ends_with("]")) {
    e.host = std::string(url);
    e.port = e.tls ? 443 : 80;
  } else {
    e.host = std::string(url.substr(0, colon));
    auto [end, ec] = std::from_chars(url.data() + colon + 1, url.data() + url.size(), e.port);
    if (ec != std::errc() || end != url.data() + url.size()) {
      return InvalidArgumentError("endpoint '" + std::string(url) + "' is not http(s)://HOST:PORT");
    }
  }
  if (e.host.starts_with("[") && e.host.ends_with("]"))
    e.host = e.host.substr(1, e.host.size() - 2);
  if (e.host.empty()) return InvalidArgumentError("endpoint lacks a host");
  return e;
}

std::string S3Endpoint::Url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

S3Credentials S3Credentials::FromEnvironment() {
  S3Credentials c;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  c.access_key = env("OBJECTCACHE_ACCESS_KEY");
  c.secret_key = env("OBJECTCACHE_SECRET_KEY");
  if (c.access_key.empty() || c.secret_key.empty()) {
    c.access_key = env("AWS_ACCESS_KEY_ID");
    c.secret_key = env("AWS_SECRET_ACCESS_KEY");
  }
  if (c.access_key.empty() || c.secret_key.empty()) c.access_key.clear(), c.secret_key.clear();
  return c;
}

struct S3Connection::Impl {
  S3Endpoint endpoint;
  S3Credentials credentials;
  asio::io_context ioc;
  // One of the two while connected.
  std::optional<beast::tcp_stream> plain;
  std::optional<TlsStream> secure;
  std::shared_ptr<asio::ssl::context> tls_context;  // outlives `secure`
  // Bounded: Beast holds a chunk-size line or a trailer section whole here until its CRLF, and
  // a response body that is not read directly (an error's) goes through its parser.
  static constexpr size_t kMaxBufferedBytes = 1 << 20;
  beast::flat_buffer buffer{kMaxBufferedBytes};
  // Beast's timeouts apply to asynchronous calls only; this one bounds the blocking ones.
  SocketDeadline deadline;
  // Where a body that has no receiver lands before on_body sees it: made once a connection and
  // never cleared (a fresh one cost every small request, a lookup's, 256 KiB of zeroing).
  std::unique_ptr<std::byte[]> body_buffer;
  static constexpr size_t kBodyBufferBytes = 256 << 10;

  std::span<std::byte> BodyBuffer() {
    if (!body_buffer) body_buffer = std::make_unique_for_overwrite<std::byte[]>(kBodyBufferBytes);
    return {body_buffer.get(), kBodyBufferBytes};
  }

  explicit Impl(std::chrono::seconds timeout) : deadline(timeout) {}

  bool connected() const { return plain || secure; }

  // A kept-alive connection the server closed while it sat idle (its idle timeout; then the
  // first request on it would fail whole, and a pool full of them could use up a request's
  // retries), or one holding bytes nothing asked for. Looks without blocking: an idle
  // connection that is readable at all (end of stream, data or an error) is not reused.
  bool IdleConnectionIsDead() {
    if (buffer.size() > 0) return true;
    pollfd p{.fd = tcp().socket().native_handle(), .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) != 0;
  }

  beast::tcp_stream& tcp() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  void Disconnect() {
    beast::error_code ec;
    if (connected()) tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    deadline.Unwatch();  // before the socket closes
    secure.reset();
    plain.reset();
    buffer.clear();
  }

  Status Connect() {
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
    if (ec) return UnavailableError("resolving " + endpoint.host + ": " + ec.message());
    beast::tcp_stream stream(ioc);
    ec = asio::error::host_not_found;
    for (const auto& entry : results) {
      tcp::socket& socket = stream.socket();
      beast::error_code ignored;
      socket.open(entry.endpoint().protocol(), ec);
      if (ec) continue;
      deadline.Watch(socket.native_handle());
      deadline.Arm();
      socket.connect(entry.endpoint(), ec);
      deadline.Disarm();
      if (!ec) break;
      const bool timed_out = deadline.fired();
      deadline.Unwatch();
      socket.close(ignored);
      if (timed_out) ec = asio::error::timed_out;
    }
    if (ec) return UnavailableError("connecting to " + endpoint.Url() + ": " + ec.message());
    stream.socket().set_option(tcp::no_delay(true), ec);
    buffer.reserve(64 << 10);
    if (!endpoint.tls) {
      plain.emplace(std::move(stream));
      return Status();
    }
    if (!tls_context) {
      OC_ASSIGN_OR_RETURN(tls_context, ClientTlsContext(endpoint.ca_file));
    }
    // Responses are mostly large bodies: read up to 256 KiB of records per system call.
    secure.emplace(std::move(stream), *tls_context, 256 << 10);
    OC_RETURN_IF_ERROR(SetVerifiedPeerName(secure->native_handle(), endpoint.host));
    deadline.Arm();
    secure->handshake(asio::ssl::stream_base::client, ec);
    deadline.Disarm();
    if (ec && deadline.fired()) ec = asio::error::timed_out;
    if (ec) {
      deadline.Unwatch();
      secure.reset();
      // A certificate that does not verify is the caller's to fix, not a transient failure.
      const bool verification = ec.category() == asio::error::get_ssl_category();
      const std::string m = "TLS handshake with " + endpoint.Url() + ": " + ec.message();
      return verification ? PermissionDeniedError(m) : UnavailableError(m);
    }
    return Status();
  }

  template <typename Stream>
  Result<S3Response> Exchange(Stream& stream, std::string_view method,
                              http::request<http::string_body>& req,
                              const std::function<Status(std::span<const std::byte>)>& on_body,
                              BodyReceiver* receiver);
};

S3Connection::S3Connection(S3Endpoint endpoint, S3Credentials credentials,
                           std::chrono::seconds timeout)
    : impl_(std::make_unique<Impl>(timeout)) {
  impl_->endpoint = std::move(endpoint);
  impl_->credentials = std::move(credentials);
}

S3Connection::~S3Connection() { impl_->Disconnect(); }

namespace {

// Reads a 2xx body straight from the socket into a BodyReceiver's room. Beast's parser would
// read every byte into the connection's buffer first and copy it out from there; here only the
// framing (chunk size lines, RFC 9112 section 7.1) and the few bytes that come in with it pass
// through that buffer. After the receiver fails, the rest of the body is read and dropped, so
// the connection stays usable.
template <typename Stream>
class DirectBodyReader {
 public:
  DirectBodyReader(Stream& stream, SocketDeadline& deadline, beast::flat_buffer& buffer,
                   BodyReceiver* receiver)
      : stream_(stream), deadline_(deadline), buffer_(buffer), receiver_(receiver) {}

  beast::error_code ReadLength(uint64_t length) { return Body(length); }

  beast::error_code ReadChunked() {
    std::string_view line;
    for (;;) {
      if (auto ec = Line(&line)) return ec;
      // The size in hex (no digits, or past 2^64: an error), then optional extensions
      // (";name=value"), which mean nothing here.
      uint64_t size = 0;
      const char* const end = line.data() + line.size();
      const auto [after, parsed] = std::from_chars(line.data(), end, size, 16);
      if (parsed != std::errc() ||
          (after != end && *after != ';' && *after != ' ' && *after != '\t')) {
        return http::error::bad_chunk;
      }
      if (size == 0) break;
      if (auto ec = Body(size)) return ec;
      if (auto ec = Line(&line)) return ec;
      if (!line.empty()) return http::error::bad_chunk;  // the chunk's data ends with CRLF
    }
    // Trailer fields, up to the empty line.
    for (int fields = 0;; ++fields) {
      if (fields > kMaxTrailerFields) return http::error::bad_chunk;
      if (auto ec = Line(&line)) return ec;
      if (line.empty()) return {};
    }
  }

  const Status& sink() const { return sink_; }

 private:
  static constexpr size_t kMaxLine = 4096;
  static constexpr int kMaxTrailerFields = 64;

  // `n` bytes of body: to the receiver while it accepts them, then dropped.
  beast::error_code Body(uint64_t n) {
    while (n > 0) {
      std::span<std::byte> room;
      if (sink_.ok()) {
        room = receiver_->NextBuffer();
        if (room.empty()) sink_ = InternalError("the body's receiver has no room for it");
      }
      const bool to_receiver = sink_.ok();
      if (!to_receiver) {
        if (dropped_.empty()) dropped_.resize(256 << 10);
        room = std::as_writable_bytes(std::span(dropped_));
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(room.size(), n));
      size_t got = 0;
      if (buffer_.size() > 0) {
        got = asio::buffer_copy(asio::buffer(room.data(), want), buffer_.data());
        buffer_.consume(got);
      } else {
        beast::error_code ec;
        deadline_.Arm();
        got = stream_.read_some(asio::buffer(room.data(), want), ec);
        if (ec) return ec;
      }
      if (to_receiver) sink_ = receiver_->Commit(got);
      n -= got;
    }
    return {};
  }

  // The next line, without its CRLF; valid until the next read. Reads a little at a time, so
  // that little of the body after the line comes in through the buffer.
  beast::error_code Line(std::string_view* line) {
    for (;;) {
      const auto data = buffer_.data();
      const std::string_view seen(static_cast<const char*>(data.data()), data.size());
      if (const size_t end = seen.find("\r\n"); end != std::string_view::npos) {
        line_.assign(seen.substr(0, end));
        buffer_.consume(end + 2);
        *line = line_;
        return {};
      }
      if (seen.size() > kMaxLine) return http::error::bad_chunk;
      beast::error_code ec;
      deadline_.Arm();
      const size_t got = stream_.read_some(buffer_.prepare(512), ec);
      if (ec) return ec;
      buffer_.commit(got);
    }
  }

  Stream& stream_;
  SocketDeadline& deadline_;
  beast::flat_buffer& buffer_;
  BodyReceiver* receiver_;
  Status sink_;
  std::string line_;
  std::string dropped_;  // room for the bytes after the receiver failed
};

}  // namespace

template <typename Stream>
Result<S3Response> S3Connection::Impl::Exchange(
    Stream& stream, std::string_view method, http::request<http::string_body>& req,
    const std::function<Status(std::span<const std::byte>)>& on_body, BodyReceiver* receiver) {
  beast::error_code ec;
  struct Disarm {
    SocketDeadline& d;
    ~Disarm() { d.Disarm(); }
  } disarm{deadline};  // an idle kept-alive connection has no deadline
  auto fail = [&](const char* what) -> Status {
    const std::string why =
        deadline.fired() ? "no progress in " + std::to_string(deadline.limit().count()) + " s"
                         : ec.message();
    Disconnect();
    return UnavailableError(std::string(what) + " " + endpoint.Url() + ": " + why);
  };
  deadline.Arm();
  http::write(stream, req, ec);
  if (ec) return fail("sending to");
  http::response_parser<http::buffer_body> parser;
  parser.skip(method == "HEAD");
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  deadline.Arm();
  http::read_header(stream, buffer, parser, ec);
  if (ec) return fail("reading the response of");
  S3Response out;
  out.status = parser.get().result_int();
  for (const auto& field : parser.get()) {
    std::string name(field.name_string());
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  const bool ok = out.status >= 200 && out.status < 300;
  if (ok && receiver && !parser.is_done() && (parser.chunked() || parser.content_length())) {
    DirectBodyReader<Stream> body(stream, deadline, buffer, receiver);
    ec = parser.chunked() ? body.ReadChunked() : body.ReadLength(*parser.content_length());
    if (ec) return fail("reading the response body of");
    if (!parser.get().keep_alive()) Disconnect();
    if (!body.sink().ok()) return body.sink();
    return out;
  }
  // Any other body (an error's, one for on_body, one that ends with the connection): the parser
  // copies its bytes to where body().data points, the receiver's place for them when there is
  // one, else the connection's body buffer (then handed to on_body, or kept as the error body).
  Status sink;
  while (!parser.is_done()) {
    const bool direct = ok && receiver && sink.ok();
    const std::span<std::byte> room = direct ? receiver->NextBuffer() : BodyBuffer();
    parser.get().body().data = room.data();
    parser.get().body().size = room.size();
    deadline.Arm();
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail("reading the response body of");
    const size_t n = room.size() - parser.get().body().size;
    if (direct) {
      if (n > 0) sink = receiver->Commit(n);
    } else if (ok) {
      if (sink.ok() && n > 0) sink = on_body(room.first(n));
    } else if (out.error_body.size() < (64 << 10)) {
      out.error_body.append(reinterpret_cast<const char*>(room.data()), n);
    }
  }
  if (!parser.get().keep_alive()) Disconnect();
  if (!sink.ok()) return sink;
  return out;
}

Result<S3Response> S3Connection::Send(
    std::string_view method, std::string_view path,
    const std::vector<std::pair<std::string, std::string>>& query, std::string_view body,
    const std::function<Status(std::span<const std::byte>)>& on_body,
    const std::vector<std::pair<std::string, std::string>>& headers, BodyReceiver* receiver) {
  Impl& m = *impl_;
  if (m.connected() && m.IdleConnectionIsDead()) m.Disconnect();
  if (!m.connected()) OC_RETURN_IF_ERROR(m.Connect());
  const std::string raw_path = s3::UriEncode(path, true);
  std::string target = raw_path;
  for (size_t i = 0; i < query.size(); ++i) {
    target += (i == 0 ? "?" : "&") + s3::UriEncode(query[i].first, false);
    if (!query[i].second.empty()) target += "=" + s3::UriEncode(query[i].second, false);
  }
  http::request<http::string_body> req{
      http::string_to_verb(beast::string_view(method.data(), method.size())), target, 11};
  const std::string host = m.endpoint.host + ":" + std::to_string(m.endpoint.port);
  req.set(http::field::host, host);
  req.keep_alive(true);
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = std::string(body);
  req.prepare_payload();
  if (!m.credentials.access_key.empty()) {
    s3::SigningInput in;
    in.method = std::string(method);
    in.raw_path = raw_path;
    in.query = query;
    in.headers = {{"host", host}};
    for (const auto& [k, v] : headers) in.headers.emplace_back(k, v);
    in.payload_hash = s3::ToHex(s3::Sha256(body));
    in.access_key = m.credentials.access_key;
    in.secret_key = m.credentials.secret_key;
    in.region = m.credentials.region;
    in.time = std::time(nullptr);
    const std::string auth = s3::SignRequest(&in);
    for (const auto& [k, v] : in.headers) {
      if (k == "x-amz-date" || k == "x-amz-content-sha256") req.set(k, v);
    }
    req.set(http::field::authorization, auth);
  }
  return m.secure ? m.Exchange(*m.secure, method, req, on_body, receiver)
                  : m.Exchange(*m.plain, method, req, on_body, receiver);
}

}  // namespace objectcache::s3
