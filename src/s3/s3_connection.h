// One keep-alive HTTP/1.1 connection, plain or over TLS, to an S3 endpoint (ours or any other),
// signing each request with SigV4 when credentials are given. Blocking; one request at a time; not
// thread-safe. The seed of the client library's connection pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "objectcache/status.h"

namespace objectcache::s3 {

struct S3Endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;
  // HTTPS: the server's certificate is verified against `ca_file` (a PEM bundle; empty: the
  // system's trusted CAs) and must name `host`.
  bool tls = false;
  std::string ca_file;
  // "http://HOST:PORT", "https://HOST:PORT" or "HOST:PORT" (plain HTTP) -> host, port and
  // scheme; the port defaults to 80 or 443. InvalidArgument otherwise.
  static Result<S3Endpoint> Parse(std::string_view url);
  // "https://HOST:PORT"
  std::string Url() const;
};

struct S3Credentials {
  std::string access_key, secret_key;  // both empty: unsigned requests
  std::string region = "us-east-1";
  // OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, else AWS_ACCESS_KEY_ID /
  // AWS_SECRET_ACCESS_KEY, else none.
  static S3Credentials FromEnvironment();
};

struct S3Response {
  unsigned status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // lowercase names
  std::string error_body;  // the body of a non-2xx response (S3 error XML)

  const std::string* Header(std::string_view name) const;
};

// Takes a response body by saying where each next piece goes, so the bytes are read straight
// into their final place (no intermediate buffer): NextBuffer() names the room for the next
// bytes; after n <= that many landed there, Commit(n) (an error stops the transfer).
class BodyReceiver {
 public:
  virtual ~BodyReceiver() = default;
  virtual std::span<std::byte> NextBuffer() = 0;
  virtual Status Commit(size_t n) = 0;
};

class S3Connection {
 public:
  S3Connection(S3Endpoint endpoint, S3Credentials credentials,
               std::chrono::seconds timeout = std::chrono::seconds(60));
  ~S3Connection();

  // Sends METHOD /path?query with `body`; a 2xx response body is handed to `on_body` in pieces
  // as it arrives, or to `receiver` when one is given (an error from either stops the
  // transfer). Unavailable on connection failures.
  Result<S3Response> Send(std::string_view method, std::string_view path,
                          const std::vector<std::pair<std::string, std::string>>& query,
                          std::string_view body,
                          const std::function<Status(std::span<const std::byte>)>& on_body,
                          const std::vector<std::pair<std::string, std::string>>& headers = {},
                          BodyReceiver* receiver = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace objectcache::s3
