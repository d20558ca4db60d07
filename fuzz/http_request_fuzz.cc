// The whole HTTP request path: raw request bytes over a socket into `objectcache serve`'s
// server (Beast parser, SigV4 gate, S3 handler and every operation, the extensions) over a
// memory store holding a plain bucket, a KV-layout bucket and a chunk object. Anonymous mode,
// so that every handler is reachable without forging signatures (sigv4_fuzz covers those).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "objectcache/chunk_object.h"
#include "server/http_server.h"
#include "server/s3_handler.h"
#include "store/memory/memory_store.h"

namespace {

using namespace objectcache;

// Sends `bytes`, half-closes, and reads until the server closes or 2 s pass.
void Exchange(uint16_t port, std::string_view bytes) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    // Close with a reset: thousands of connections a second must not leave the client's ports
    // in TIME_WAIT (the ephemeral range would run out in under a minute).
    const linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      fd = -1;
      if (attempt == 100) std::abort();  // the server is gone: that is a finding
      ::usleep(10000);
    }
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 2000) > 0 && ::recv(fd, buf, sizeof buf, 0) > 0) {
  }
  ::close(fd);
}

struct Fixture {
  std::unique_ptr<Store> store = NewMemoryStore();
  server::ServerMetrics metrics;
  std::unique_ptr<server::S3Handler> handler;
  std::unique_ptr<server::HttpServer> http;

  Fixture() {
    server::S3Options s3;
    s3.anonymous = true;
    handler = std::make_unique<server::S3Handler>(store.get(), &metrics, s3);
    server::HttpServerOptions options;
    options.port = 0;
    options.workers = 1;
    options.limits.body_bytes = 4 << 20;
    options.limits.header_timeout = std::chrono::seconds(1);
    options.limits.io_timeout = std::chrono::seconds(1);
    options.limits.idle_timeout = std::chrono::seconds(1);
    http = std::move(*server::HttpServer::Start(options, handler.get(), &metrics));
    const uint16_t port = http->port();
    Exchange(port, "PUT /b HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    Exchange(port, "PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    Exchange(port,
             "PUT /kv HTTP/1.1\r\nHost: x\r\nx-objectcache-kv-layout: llama-3.1-8b\r\n"
             "Content-Length: 0\r\n\r\n");
    // Chunk key 000...01 of llama-3.1-8b: stored straight into the store, as PUT would.
    const ModelPreset model = *FindModelPreset("llama-3.1-8b");
    const ChunkKey key = *ChunkKey::FromHex("00000000000000000000000000000001");
    std::string kv(model.layout.ChunkKvBytes(), 'k');
    std::string object = *EncodeChunkObject(model.layout, key, AsBytes(kv));
    (void)store->Put("kv/" + key.ToHex(), AsBytes(object));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();
  Exchange(fixture->http->port(), std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
