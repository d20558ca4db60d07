// An HttpExchange held in memory, for testing handlers without sockets (as Envoy's
// test/mocks/http/mocks.h stands in for its connections): the request is given whole, the
// response is recorded, and the same rules hold as on a connection (a body written without a
// response begun is an error; a streamed response's pieces are joined).
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_exchange.h"

namespace objectcache::server {

class MemoryHttpExchange final : public HttpExchange {
 public:
  // `headers` with lowercase names. `body_piece` bounds each ReadBody (to exercise streaming).
  MemoryHttpExchange(std::string method, std::string target, Headers headers, std::string body = "",
                     size_t body_piece = SIZE_MAX);

  std::string_view method() const override { return method_; }
  std::string_view target() const override { return target_; }
  Headers RequestHeaders() const override { return headers_; }
  std::optional<uint64_t> ContentLength() const override { return body_.size(); }
  asio::awaitable<Result<size_t>> ReadBody(std::span<std::byte> dest) override;
  bool body_done() const override { return read_ == body_.size(); }
  asio::awaitable<Status> Respond(unsigned status, Headers headers, std::string body) override;
  asio::awaitable<Status> RespondHeaderOnly(unsigned status, Headers headers,
                                            uint64_t content_length) override;
  asio::awaitable<Status> BeginResponse(unsigned status, Headers headers,
                                        std::optional<uint64_t> content_length) override;
  asio::awaitable<Status> WriteBody(std::span<const std::byte> bytes) override;
  asio::awaitable<Status> EndResponse() override;
  void CloseAfterResponse() override { close_after_ = true; }
  bool sends_files() const override { return sends_files_; }
  // Reads the pieces (pread) into the recorded body: the handlers' file path, without a socket.
  asio::awaitable<Status> WriteBodyFiles(std::span<const FilePiece> pieces) override;

  // Body writes (and file pieces) fail (Unavailable) once the recorded body would pass `bytes`:
  // a client that went away mid-response.
  void FailWritesAfter(uint64_t bytes) { write_limit_ = bytes; }

  // Offer WriteBodyFiles to the handler (as a plain TCP connection does).
  void SetSendsFiles(bool on) { sends_files_ = on; }
  // Bytes the handler sent through WriteBodyFiles.
  uint64_t file_bytes_sent() const { return file_bytes_sent_; }

  // Runs `fn` when the handler first reads the body: another client acting between the
  // handler's checks and its commit, at a certain point.
  void BeforeFirstBodyRead(std::function<void()> fn) { before_body_ = std::move(fn); }

  // The response as recorded. status() is 0 until a response began.
  unsigned status() const { return status_; }
  const Headers& response_headers() const { return response_headers_; }
  // The value of response header `name` (case-insensitive), or nullopt.
  std::optional<std::string> ResponseHeader(std::string_view name) const;
  const std::string& response_body() const { return response_body_; }
  // A streamed response was ended (or the response was whole).
  bool complete() const { return complete_; }
  bool close_after() const { return close_after_; }
  // How many times a response was begun: more than one is a handler bug.
  int responses() const { return responses_; }

 private:
  std::string method_, target_;
  Headers headers_;
  std::string body_;
  size_t body_piece_;
  size_t read_ = 0;
  std::function<void()> before_body_;
  unsigned status_ = 0;
  Headers response_headers_;
  std::string response_body_;
  bool streaming_ = false;
  bool complete_ = false;
  bool close_after_ = false;
  bool sends_files_ = false;
  uint64_t file_bytes_sent_ = 0;
  uint64_t write_limit_ = UINT64_MAX;
  int responses_ = 0;
};

// Runs handler.Handle(exchange) to its end on `io` (which must not be running elsewhere),
// including every hop the handler makes to other threads and back.
void RunExchange(asio::io_context& io, RequestHandler& handler, HttpExchange& exchange);

}  // namespace objectcache::server
