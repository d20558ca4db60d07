// S3Connection's reading of response bodies into a BodyReceiver, against a loopback server that
// answers each request with bytes written here (chunked framing of every shape, lengths, bad
// framing), in small writes so that framing and body arrive split at every kind of place.
#include "s3/s3_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <thread>

namespace objectcache::s3 {
namespace {

sockaddr_in LoopbackAddress(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

// A socket listening on 127.0.0.1, at a port the kernel chose (set in *port).
int ListenOnLoopback(int backlog, uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = LoopbackAddress(0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, backlog), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

// Answers the requests of each connection with the next of `responses`, written `piece` bytes
// at a time, closing the connection after each when `close_after_each`; counts the connections
// it accepted.
class CannedServer {
 public:
  CannedServer(std::vector<std::string> responses, size_t piece, bool close_after_each = false)
      : responses_(std::move(responses)), piece_(piece), close_after_each_(close_after_each) {
    listener_ = ListenOnLoopback(4, &port_);
    thread_ = std::thread([this] { Serve(); });
  }

  ~CannedServer() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }

  S3Endpoint endpoint() const { return *S3Endpoint::Parse("127.0.0.1:" + std::to_string(port_)); }
  int connections() const { return connections_; }

 private:
  void Serve() {
    size_t next = 0;
    while (next < responses_.size()) {
      const int conn = accept(listener_, nullptr, nullptr);
      if (conn < 0) return;
      connections_++;
      const int one = 1;
      setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::string request;
      char buf[4096];
      while (next < responses_.size()) {
        // One request: no body, so it ends with its blank line.
        size_t end;
        while ((end = request.find("\r\n\r\n")) == std::string::npos) {
          const ssize_t n = recv(conn, buf, sizeof(buf), 0);
          if (n <= 0) break;
          request.append(buf, static_cast<size_t>(n));
        }
        if (end == std::string::npos) break;
        request.erase(0, end + 4);
        const std::string& r = responses_[next++];
        for (size_t at = 0; at < r.size(); at += piece_) {
          if (send(conn, r.data() + at, std::min(piece_, r.size() - at), MSG_NOSIGNAL) < 0) break;
        }
        if (close_after_each_) break;
      }
      close(conn);
    }
  }

  std::vector<std::string> responses_;
  size_t piece_;
  bool close_after_each_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// Collects the body in rooms of `room` bytes; fails its Commit once `fail_after` bytes are in.
class StringReceiver : public BodyReceiver {
 public:
  explicit StringReceiver(size_t room, size_t fail_after = SIZE_MAX)
      : room_(room), fail_after_(fail_after) {}
  std::span<std::byte> NextBuffer() override {
    space_.resize(room_);
    return std::as_writable_bytes(std::span(space_));
  }
  Status Commit(size_t n) override {
    EXPECT_LE(n, room_);
    body_.append(space_.data(), n);
    return body_.size() >= fail_after_ ? DataLossError("receiver: enough") : Status();
  }
  const std::string& body() const { return body_; }

 private:
  size_t room_, fail_after_;
  std::string space_, body_;
};

std::string Body(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
  return s;
}

std::string Head(std::string_view framing) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" + std::string(framing) +
         "\r\n\r\n";
}

// `body` cut into chunks of the given sizes (the rest in one last chunk), with an extension on
// every other size line and a trailer field after the last chunk.
std::string Chunked(const std::string& body, std::vector<size_t> sizes) {
  std::string out = Head("Transfer-Encoding: chunked");
  size_t at = 0;
  for (size_t i = 0; at < body.size(); ++i) {
    const size_t n = std::min(i < sizes.size() ? sizes[i] : body.size(), body.size() - at);
    char line[32];
    std::snprintf(line, sizeof(line), "%zX%s\r\n", n, i % 2 ? ";note=\"x\"" : "");
    out += line + body.substr(at, n) + "\r\n";
    at += n;
  }
  return out + "0\r\nX-Trailer: done\r\n\r\n";
}

Result<S3Response> Get(S3Connection& conn, BodyReceiver* receiver) {
  return conn.Send("GET", "/bucket/key", {}, "", nullptr, {}, receiver);
}

TEST(S3ConnectionBodyTest, ChunkedAndSizedBodiesLandWholeInTheReceiversRooms) {
  const std::string body = Body(300000);
  for (size_t piece : {size_t{1} << 20, size_t{4093}, size_t{7}}) {
    SCOPED_TRACE("written " + std::to_string(piece) + " bytes at a time");
    CannedServer server(
        {Chunked(body, {1, 2, 4096, 65536, 3}),
         Head("Content-Length: " + std::to_string(body.size())) + body, Chunked(body, {})},
        piece);
    S3Connection conn(server.endpoint(), {});
    for (size_t room : {size_t{5}, size_t{65536}, size_t{1} << 20}) {
      StringReceiver receiver(room);
      Result<S3Response> r = Get(conn, &receiver);
      ASSERT_TRUE(r.ok()) << r.error().ToString();
      EXPECT_EQ(r->status, 200u);
      EXPECT_TRUE(receiver.body() == body) << "room " << room;
    }
    EXPECT_EQ(server.connections(), 1);  // each response ended where the next began
  }
}

TEST(S3ConnectionBodyTest, BadChunkFramingIsAnErrorNotABody) {
  const std::string head = Head("Transfer-Encoding: chunked");
  for (const std::string& bad : {
           head + "zz\r\nabc\r\n0\r\n\r\n",                 // no hex digit
           head + "3x\r\nabc\r\n0\r\n\r\n",                 // junk after the digits
           head + "10000000000000003\r\nabc\r\n0\r\n\r\n",  // past 2^64
           head + "3\r\nabcd\r\n0\r\n\r\n",                 // the data runs past its size
           head + std::string(5000, '1') + "\r\n",          // a size line without end
       }) {
    SCOPED_TRACE(bad.substr(head.size(), 40));
    CannedServer server({bad}, 4096);
    S3Connection conn(server.endpoint(), {}, std::chrono::seconds(5));
    StringReceiver receiver(4096);
    Result<S3Response> r = Get(conn, &receiver);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), StatusCode::kUnavailable) << r.error().ToString();
  }
}

TEST(S3ConnectionBodyTest, TooManyTrailerFieldsAreAnError) {
  std::string trailers;
  for (int i = 0; i < 100; ++i) trailers += "X-T" + std::to_string(i) + ": v\r\n";
  CannedServer server(
      {Head("Transfer-Encoding: chunked") + "3\r\nabc\r\n0\r\n" + trailers + "\r\n"}, 4096);
  S3Connection conn(server.endpoint(), {}, std::chrono::seconds(5));
  StringReceiver receiver(4096);
  Result<S3Response> r = Get(conn, &receiver);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable);
}

TEST(S3ConnectionBodyTest, AnErrorBodysEndlessTrailerOrChunkLineIsAnError) {
  // Read by Beast's parser (not the direct reader): its buffer is bounded, so neither 4 MiB of
  // trailer fields nor a 4 MiB chunk extension is held.
  const std::string head = "HTTP/1.1 503 Slow Down\r\nTransfer-Encoding: chunked\r\n\r\n";
  std::string trailers;
  while (trailers.size() < (4u << 20)) trailers += "X-T: " + std::string(1000, 't') + "\r\n";
  const std::string extension = ";a=" + std::string(4u << 20, 'e');
  for (const std::string& response : {head + "3\r\nabc\r\n0\r\n" + trailers + "\r\n",
                                      head + "3" + extension + "\r\nabc\r\n0\r\n\r\n"}) {
    CannedServer server({response}, 65536);
    S3Connection conn(server.endpoint(), {}, std::chrono::seconds(5));
    StringReceiver receiver(4096);
    Result<S3Response> r = Get(conn, &receiver);
    ASSERT_FALSE(r.ok()) << r->status;
    EXPECT_EQ(r.error().code(), StatusCode::kUnavailable) << r.error().ToString();
  }
}

TEST(S3ConnectionBodyTest, AReceiverThatFailsGetsNoMoreAndTheConnectionIsReused) {
  const std::string body = Body(200000);
  CannedServer server(
      {Chunked(body, {70000}), Head("Content-Length: " + std::to_string(body.size())) + body,
       Chunked(body, {})},
      65536);
  S3Connection conn(server.endpoint(), {});
  for (int i = 0; i < 2; ++i) {
    StringReceiver failing(1000, 50000);
    Result<S3Response> r = Get(conn, &failing);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), StatusCode::kDataLoss);
    // Nothing after the failing Commit, which came with the room that reached 50000 bytes.
    EXPECT_GE(failing.body().size(), 50000u);
    EXPECT_LT(failing.body().size(), 51000u);
    EXPECT_TRUE(body.starts_with(failing.body()));
  }
  StringReceiver receiver(65536);
  Result<S3Response> r = Get(conn, &receiver);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(receiver.body() == body);
  EXPECT_EQ(server.connections(), 1);
}

TEST(S3ConnectionBodyTest, AnErrorResponseKeepsItsBodyAsTheErrorBody) {
  const std::string xml = "<Error><Code>NoSuchKey</Code></Error>";
  CannedServer server({"HTTP/1.1 404 Not Found\r\nContent-Length: " + std::to_string(xml.size()) +
                       "\r\n\r\n" + xml},
                      4096);
  S3Connection conn(server.endpoint(), {});
  StringReceiver receiver(4096);
  Result<S3Response> r = Get(conn, &receiver);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->status, 404u);
  EXPECT_EQ(r->error_body, xml);
  EXPECT_EQ(receiver.body(), "");
}

// A peer that goes quiet: its listener never accepts (the kernel completes the handshakes into
// a backlog of `backlog`), or, with `answer`, one connection is accepted, its request read and
// `answer` written, and then nothing more is sent until the client goes away.
class QuietServer {
 public:
  explicit QuietServer(std::optional<std::string> answer, int backlog = 4) {
    listener_ = ListenOnLoopback(backlog, &port_);
    if (!answer) return;
    thread_ = std::thread([this, answer = std::move(*answer)] {
      const int conn = accept(listener_, nullptr, nullptr);
      if (conn < 0) return;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = recv(conn, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      (void)send(conn, answer.data(), answer.size(), MSG_NOSIGNAL);
      while (recv(conn, buf, sizeof(buf), 0) > 0) {
      }
      close(conn);
    });
  }
  ~QuietServer() {
    shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  uint16_t port() const { return port_; }
  S3Endpoint endpoint() const { return *S3Endpoint::Parse("127.0.0.1:" + std::to_string(port_)); }

 private:
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

void ExpectTimedOut(const Result<S3Response>& r, std::string_view what) {
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable) << r.error().ToString();
  EXPECT_NE(r.error().message().find("no progress in 1 s"), std::string::npos)
      << r.error().ToString();
}

TEST(S3ConnectionTimeoutTest, AServerThatNeverAnswersTimesOut) {
  QuietServer server(std::nullopt);
  S3Connection conn(server.endpoint(), {}, std::chrono::seconds(1));
  ExpectTimedOut(Get(conn, nullptr), "no response");
}

TEST(S3ConnectionTimeoutTest, ABodyThatStopsTimesOutWithAndWithoutAReceiver) {
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "into a receiver" : "handed to on_body");
    QuietServer server(head + Body(1000));
    S3Connection conn(server.endpoint(), {}, std::chrono::seconds(1));
    StringReceiver receiver(4096);
    size_t handed = 0;
    Result<S3Response> r = conn.Send(
        "GET", "/bucket/key", {}, "",
        [&](std::span<const std::byte> b) {
          handed += b.size();
          return Status();
        },
        {}, direct ? &receiver : nullptr);
    ExpectTimedOut(r, "a body cut short");
    // The receiver has what came; on_body is handed bytes in pieces of 256 KiB or at the end.
    EXPECT_EQ(direct ? receiver.body().size() : handed, direct ? 1000u : 0u);
  }
}

TEST(S3ConnectionTimeoutTest, AConnectionTheServerNeverAcceptsTimesOut) {
  // A listener whose backlog is full drops further handshakes: the connect waits on its own.
  QuietServer server(std::nullopt, /*backlog=*/0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    fillers.push_back(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    const sockaddr_in addr = LoopbackAddress(server.port());
    (void)connect(fillers.back(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  }
  S3Connection conn(server.endpoint(), {}, std::chrono::seconds(1));
  Result<S3Response> r = Get(conn, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable) << r.error().ToString();
  EXPECT_NE(r.error().message().find("connecting to"), std::string::npos) << r.error().ToString();
  for (int fd : fillers) close(fd);
}

TEST(S3ConnectionTimeoutTest, AnIdleKeptAliveConnectionIsNotTimedOut) {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
  CannedServer server({ok, ok}, 4096);
  S3Connection conn(server.endpoint(), {}, std::chrono::seconds(1));
  StringReceiver receiver(4096);
  ASSERT_TRUE(Get(conn, &receiver).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // longer than the timeout
  Result<S3Response> r = Get(conn, &receiver);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(receiver.body(), "hihi");
  EXPECT_EQ(server.connections(), 1);
}

// Two GETs on one connection, 200 ms apart (long enough for what the server sent meanwhile to
// arrive): both bodies as received and how many connections the server accepted.
struct TwoGets {
  std::string bodies;
  int connections = 0;
};
TwoGets GetTwiceWithAPause(std::vector<std::string> responses, bool close_after_each) {
  CannedServer server(std::move(responses), 4096, close_after_each);
  S3Connection conn(server.endpoint(), {});
  StringReceiver receiver(4096);
  Result<S3Response> first = Get(conn, &receiver);
  EXPECT_TRUE(first.ok()) << first.error().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Result<S3Response> second = Get(conn, &receiver);
  EXPECT_TRUE(second.ok()) << second.error().ToString();
  return {receiver.body(), server.connections()};
}

// A kept-alive connection the server closed while it was idle (an idle timeout) is not used
// for the next request, which goes out on a new connection instead of failing.
TEST(S3ConnectionReuseTest, AConnectionTheServerClosedWhileIdleIsNotUsed) {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
  const TwoGets got = GetTwiceWithAPause({ok, ok}, /*close_after_each=*/true);
  EXPECT_EQ(got.bodies, "hihi");
  EXPECT_EQ(got.connections, 2);
}

// Bytes that arrive on an idle connection, after the response they followed, answer nothing:
// the next request goes out on a new connection (this server takes one at a time, and moves on
// once the client has closed the old one) instead of reading them as its response.
TEST(S3ConnectionReuseTest, BytesOnAnIdleConnectionAreNotTakenForTheNextResponse) {
  const std::string first = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
  const std::string stray = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray";
  const std::string second = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const TwoGets got = GetTwiceWithAPause({first + stray, second}, /*close_after_each=*/false);
  EXPECT_EQ(got.bodies, "hiok");
  EXPECT_EQ(got.connections, 2);
}

}  // namespace
}  // namespace objectcache::s3
