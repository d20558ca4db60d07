// The read windows of layerwise responses (layerwise.cc), kept between responses.
//
// A window's pages appear when first written (PageBuffer::Pages::kOnFirstWrite): over RADOS a
// window's slices stay in librados's buffers and its pages are never touched, while the copied
// path over the local store reads every slice into it. A fresh mapping per response made that
// path fault every page in again, about 0.2 CPU-s per GiB (`bench path`, v1 and v2 copied), so a
// finished response gives its windows back here and the next takes them, pages resident.
//
// A kept buffer still holds an earlier response's bytes: a response sends from its window only
// bytes its own reads wrote there, or zeros it wrote itself (layerwise.cc, SendFramesCopied).
//
// Kept buffers are memory the server holds, so they count against the request memory budget
// (memory_budget.h) like the windows of the responses in flight: a buffer the budget cannot
// hold is not kept, and a response the budget refuses has the kept ones dropped (DropAll) before
// it asks again, so idle windows never stand in a request's way. A buffer is handed out at the
// size asked for, its pages past it unmapped, so a response holds no more than its lease.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "core/page_buffer.h"
#include "server/memory_budget.h"

namespace objectcache::server {

class WindowBuffers {
 public:
  // Keeps at most `keep_bytes` of buffers, dropping the oldest first, each within `budget`
  // (which must outlive this).
  WindowBuffers(MemoryBudget* budget, size_t keep_bytes)
      : keep_bytes_(keep_bytes), lease_(budget->NewLease()) {}

  // A buffer of `bytes`: a kept one of that size, or a kept mapped one of at most twice that
  // cut down to it, else a new one.
  PageBuffer Take(size_t bytes) {
    PageBuffer b;
    {
      std::lock_guard lock(mu_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->size() == bytes ||
            (it->mapped() && it->size() >= bytes && it->size() / 2 <= bytes)) {
          b = std::move(*it);
          kept_.erase(it);
          kept_bytes_ -= b.size();
          lease_.ShrinkTo(kept_bytes_);
          break;
        }
      }
    }
    if (b.size() == 0) return PageBuffer(bytes, 0, PageBuffer::Pages::kOnFirstWrite);
    b.ShrinkTo(bytes);  // outside the lock: it unmaps
    return b;
  }

  void Give(PageBuffer b) {
    if (b.size() == 0 || b.size() > keep_bytes_) return;
    std::deque<PageBuffer> dropped;  // unmapped outside the lock
    std::lock_guard lock(mu_);
    while (kept_bytes_ + b.size() > keep_bytes_) {
      kept_bytes_ -= kept_.front().size();
      dropped.push_back(std::move(kept_.front()));
      kept_.pop_front();
    }
    lease_.ShrinkTo(kept_bytes_);
    if (!lease_.GrowTo(kept_bytes_ + b.size())) {
      dropped.push_back(std::move(b));  // the budget is in use by requests
      return;
    }
    kept_bytes_ += b.size();
    kept_.push_back(std::move(b));
  }

  // Drops every kept buffer, giving its bytes back to the budget; false when none was kept.
  bool DropAll() {
    std::deque<PageBuffer> dropped;  // unmapped outside the lock
    std::lock_guard lock(mu_);
    dropped.swap(kept_);
    kept_bytes_ = 0;
    lease_.ShrinkTo(0);
    return !dropped.empty();
  }

  size_t kept_bytes() {
    std::lock_guard lock(mu_);
    return kept_bytes_;
  }

 private:
  const size_t keep_bytes_;
  std::mutex mu_;
  std::deque<PageBuffer> kept_;  // oldest first
  size_t kept_bytes_ = 0;
  MemoryBudget::Lease lease_;  // kept_bytes_
};

}  // namespace objectcache::server
