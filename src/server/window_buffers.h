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
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "core/page_buffer.h"

namespace objectcache::server {

class WindowBuffers {
 public:
  // Keeps at most `keep_bytes` of buffers, dropping the oldest first.
  explicit WindowBuffers(size_t keep_bytes) : keep_bytes_(keep_bytes) {}

  // A buffer of at least `bytes`: a kept one of at most twice that, else a new one.
  PageBuffer Take(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->size() >= bytes && it->size() / 2 <= bytes) {
          PageBuffer b = std::move(*it);
          kept_.erase(it);
          kept_bytes_ -= b.size();
          return b;
        }
      }
    }
    return PageBuffer(bytes, 0, PageBuffer::Pages::kOnFirstWrite);
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
    kept_bytes_ += b.size();
    kept_.push_back(std::move(b));
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
};

}  // namespace objectcache::server
