#include "server/memory_exchange.h"

#include <strings.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <cstring>

#include <unistd.h>

namespace objectcache::server {

MemoryHttpExchange::MemoryHttpExchange(std::string method, std::string target, Headers headers,
                                       std::string body, size_t body_piece)
    : method_(std::move(method)),
      target_(std::move(target)),
      headers_(std::move(headers)),
      body_(std::move(body)),
      body_piece_(body_piece == 0 ? 1 : body_piece) {}

asio::awaitable<Result<size_t>> MemoryHttpExchange::ReadBody(std::span<std::byte> dest) {
  if (before_body_) std::exchange(before_body_, nullptr)();
  const size_t n = std::min({dest.size(), body_.size() - read_, body_piece_});
  std::memcpy(dest.data(), body_.data() + read_, n);
  read_ += n;
  co_return n;
}

asio::awaitable<Status> MemoryHttpExchange::Respond(unsigned status, Headers headers,
                                                    std::string body) {
  ++responses_;
  status_ = status;
  response_headers_ = std::move(headers);
  response_body_ = std::move(body);
  complete_ = true;
  co_return Status();
}

asio::awaitable<Status> MemoryHttpExchange::RespondHeaderOnly(unsigned status, Headers headers,
                                                              uint64_t content_length) {
  ++responses_;
  status_ = status;
  response_headers_ = std::move(headers);
  response_headers_.emplace_back("content-length", std::to_string(content_length));
  complete_ = true;
  co_return Status();
}

asio::awaitable<Status> MemoryHttpExchange::BeginResponse(unsigned status, Headers headers,
                                                          std::optional<uint64_t> content_length) {
  ++responses_;
  status_ = status;
  response_headers_ = std::move(headers);
  if (content_length) {
    response_headers_.emplace_back("content-length", std::to_string(*content_length));
  } else {
    response_headers_.emplace_back("transfer-encoding", "chunked");
  }
  streaming_ = true;
  co_return Status();
}

asio::awaitable<Status> MemoryHttpExchange::WriteBody(std::span<const std::byte> bytes) {
  if (!streaming_ || complete_) co_return InternalError("writing a body that was never begun");
  if (response_body_.size() + bytes.size() > write_limit_) co_return UnavailableError("gone");
  response_body_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  co_return Status();
}

asio::awaitable<Status> MemoryHttpExchange::WriteBodyFiles(std::span<const FilePiece> pieces) {
  if (!sends_files_) co_return InternalError("this exchange does not send files");
  if (!streaming_ || complete_) co_return InternalError("writing a body that was never begun");
  for (const FilePiece& p : pieces) {
    if (response_body_.size() + p.length > write_limit_) co_return UnavailableError("gone");
    std::string bytes(p.length, '\0');
    const ssize_t n = ::pread(p.fd, bytes.data(), bytes.size(), static_cast<off_t>(p.offset));
    if (n < 0 || static_cast<uint64_t>(n) != p.length) {
      // As on a connection: the response is cut short (never completed), not padded.
      co_return DataLossError("a file ended before the piece to send");
    }
    response_body_ += bytes;
    file_bytes_sent_ += p.length;
  }
  co_return Status();
}

asio::awaitable<Status> MemoryHttpExchange::EndResponse() {
  if (!streaming_ || complete_) co_return InternalError("ending a body that was never begun");
  complete_ = true;
  co_return Status();
}

std::optional<std::string> MemoryHttpExchange::ResponseHeader(std::string_view name) const {
  for (const auto& [k, v] : response_headers_) {
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  }
  return std::nullopt;
}

void RunExchange(asio::io_context& io, RequestHandler& handler, HttpExchange& exchange) {
  // The handler's hops to its blocking pool leave `io` without work for a while: a guard keeps
  // run() from returning until the handler has finished.
  auto guard = asio::make_work_guard(io);
  asio::co_spawn(io, handler.Handle(exchange), [&guard](std::exception_ptr e) {
    guard.reset();
    if (e) std::rethrow_exception(e);
  });
  io.restart();
  io.run();
}

}  // namespace objectcache::server
