// PacedTransfer: a response's place in the bandwidth scheduler (sched/bandwidth_scheduler.h,
// docs/scheduler.md), and its body written at the pace the scheduler sets. Used by the
// layerwise response (layerwise.cc).
#pragma once

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "objectcache/status.h"
#include "sched/bandwidth_scheduler.h"
#include "server/http_exchange.h"

namespace objectcache::server {

// Pieces a paced response is sent in: the unit of the bandwidth scheduler's pacing.
inline constexpr size_t kPacedPiece = 1 << 20;

// A layerwise response's place in the bandwidth scheduler, for as long as the response lasts
// (its share returns when the coroutine ends, however it ends).
class PacedTransfer {
 public:
  // Without a cap nothing is paced, and the pacer (one lock for all workers) is left alone.
  PacedTransfer(sched::Pacer* pacer, uint64_t bytes, double need, uint64_t start_bytes)
      : pacer_(pacer->cap() == sched::kUnlimited ? nullptr : pacer),
        id_(pacer_ ? pacer_->Begin(bytes, need, start_bytes) : 0) {}
  ~PacedTransfer() {
    if (pacer_) pacer_->End(id_);
  }
  PacedTransfer(const PacedTransfer&) = delete;
  PacedTransfer& operator=(const PacedTransfer&) = delete;

  // Sends `bytes` through `ex` at the pace the scheduler sets, a piece at a time.
  asio::awaitable<Status> Write(HttpExchange& ex, std::span<const std::byte> bytes) {
    if (!pacer_) co_return co_await ex.WriteBody(bytes);
    while (!bytes.empty()) {
      const std::span<const std::byte> piece = bytes.first(std::min(bytes.size(), kPacedPiece));
      co_await AwaitGrant(piece.size());
      pacer_->WriteStarted(id_);
      Status s = co_await ex.WriteBody(piece);
      pacer_->WriteFinished(id_);
      if (!s.ok()) co_return s;
      bytes = bytes.subspan(piece.size());
    }
    co_return Status();
  }

  // As Write, for bytes in several places, sent in order (one gathering write without a cap).
  asio::awaitable<Status> WritePieces(HttpExchange& ex,
                                      std::span<const std::span<const std::byte>> pieces) {
    if (!pacer_) co_return co_await ex.WriteBodyPieces(pieces);
    for (std::span<const std::byte> p : pieces) {
      if (Status s = co_await Write(ex, p); !s.ok()) co_return s;
    }
    co_return Status();
  }

  // As Write, for file pieces sent without a copy (HttpExchange::WriteBodyFiles).
  asio::awaitable<Status> WriteFiles(HttpExchange& ex, std::span<const FilePiece> pieces) {
    if (!pacer_) co_return co_await ex.WriteBodyFiles(pieces);
    for (const FilePiece& p : pieces) {
      for (uint64_t at = 0; at < p.length;) {
        const FilePiece piece{.fd = p.fd,
                              .offset = p.offset + at,
                              .length = std::min<uint64_t>(p.length - at, kPacedPiece)};
        co_await AwaitGrant(piece.length);
        pacer_->WriteStarted(id_);
        Status s = co_await ex.WriteBodyFiles(std::span<const FilePiece>(&piece, 1));
        pacer_->WriteFinished(id_);
        if (!s.ok()) co_return s;
        at += piece.length;
      }
    }
    co_return Status();
  }

 private:
  // Waits until the scheduler grants `bytes`.
  asio::awaitable<void> AwaitGrant(uint64_t bytes) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      const sched::Pacer::Grant g = pacer_->Reserve(id_, bytes);
      if (g.wait > 0) {
        timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(g.wait)));
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if (g.granted) co_return;
    }
  }

  sched::Pacer* const pacer_;  // null: no cap
  const uint64_t id_;
};

}  // namespace objectcache::server
