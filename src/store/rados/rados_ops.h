// The librados pieces RadosStore (rados_store.cc) reads and writes with: caller memory lent to
// librados without a copy, bytes taken out of its buffers, completions counted down, and one
// read operation per object (stat, attributes, and its ranges grouped into extents). Internal
// to src/store/rados.
#pragma once

#include <rados/librados.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "objectcache/store.h"
#include "store/rados/rados_capacity.h"

namespace objectcache::rados_internal {

// Wraps caller memory without copying; valid only while the memory is.
inline librados::bufferlist StaticBuffer(std::span<const std::byte> bytes) {
  librados::bufferlist bl;
  if (!bytes.empty()) {
    bl.push_back(ceph::buffer::create_static(
        static_cast<unsigned>(bytes.size()),
        const_cast<char*>(reinterpret_cast<const char*>(bytes.data()))));
  }
  return bl;
}

// Copies dest.size() bytes from `offset` of `bl` into dest.
inline void CopyOut(const librados::bufferlist& bl, std::span<std::byte> dest,
                    uint64_t offset = 0) {
  auto it = bl.cbegin(offset);
  it.copy(static_cast<unsigned>(dest.size()), reinterpret_cast<char*>(dest.data()));
}

// `length` bytes from `offset` of `bl` where they lie in one of its buffers; empty where they
// span two (or length is 0).
inline std::span<const std::byte> Contiguous(const librados::bufferlist& bl, uint64_t offset,
                                             uint64_t length) {
  for (const auto& piece : bl.buffers()) {
    if (offset < piece.length()) {
      if (length > piece.length() - offset) return {};
      return {reinterpret_cast<const std::byte*>(piece.c_str()) + offset, length};
    }
    offset -= piece.length();
  }
  return {};
}

// Ranges of one object that overlap, touch or lie at most this far apart are read by one read
// of the span they cover (a chunk object's consecutive layers, docs/object-format.md, are
// separated only by alignment padding), up to kMaxExtentBytes a read.
constexpr uint64_t kMaxExtentGap = 16 << 10;
constexpr uint64_t kMaxExtentBytes = 64 << 20;

// Counts asynchronous operations in flight: whoever waits for them to fall to some number wakes
// once, when they do, not once an operation (librados calls OnComplete from its own thread).
class Countdown {
 public:
  static void OnComplete(librados::completion_t, void* self) {
    static_cast<Countdown*>(self)->Done();
  }
  void Add() {
    std::lock_guard lock(mu_);
    ++left_;
  }
  void Done() {
    std::lock_guard lock(mu_);
    if (--left_ <= wake_at_) cv_.notify_all();
  }
  size_t left() {
    std::lock_guard lock(mu_);
    return left_;
  }
  // Until at most `n` are in flight.
  void WaitUntilAtMost(size_t n) {
    std::unique_lock lock(mu_);
    wake_at_ = n;
    cv_.wait(lock, [&] { return left_ <= n; });
    wake_at_ = 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_ = 0;
  size_t wake_at_ = 0;  // Done notifies once left_ falls to this (a waiter's n; else 0)
};

struct Completion {
  Completion() : c(librados::Rados::aio_create_completion(), Release) {}
  // None yet: for operations that may run synchronously.
  explicit Completion(std::nullptr_t) : c(nullptr, Release) {}
  // Counted down by `countdown` when it completes.
  explicit Completion(Countdown* countdown)
      : c(librados::Rados::aio_create_completion(countdown, Countdown::OnComplete), Release) {}
  static void Release(librados::AioCompletion* p) { p->release(); }

  std::unique_ptr<librados::AioCompletion, void (*)(librados::AioCompletion*)> c;
  int Wait() {
    c->wait_for_complete();
    return c->get_return_value();
  }
};

// What one read operation on one object brings back: its size, mtime, version, attributes and
// any number of ranges. Every such operation starts with the object's stat.
struct ObjectRead {
  ObjectRead() { op.stat(&size, &mtime, &stat_rval); }
  ObjectRead(const ObjectRead&) = delete;
  ObjectRead& operator=(const ObjectRead&) = delete;

  librados::ObjectReadOperation op;
  Completion done{nullptr};  // set by whoever runs `op` asynchronously
  uint64_t size = 0;
  time_t mtime = 0;
  int stat_rval = 0;
  librados::bufferlist attributes;
  int attributes_rval = 0;
  // The version's name and access time (rados_capacity.h), when asked for.
  librados::bufferlist generation, atime;
  int generation_rval = 0, atime_rval = 0;
  void ReadAccess() {
    op.getxattr(kGenerationXattr, &generation, &generation_rval);
    op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
    op.getxattr(kAccessTimeXattr, &atime, &atime_rval);
    op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
  }
  std::string Generation() {
    return generation_rval < 0 ? std::string()
                               : std::string(generation.c_str(), generation.length());
  }
  std::string AccessTime() {
    return atime_rval < 0 ? std::string() : std::string(atime.c_str(), atime.length());
  }
  // One read of [offset, offset + length) that serves `reads`. Its bytes are shared, so that
  // RetrieveRangesInPlace can lend them.
  struct Extent {
    uint64_t offset = 0, length = 0;
    std::vector<RangeRead*> reads;
    std::shared_ptr<librados::bufferlist> bl = std::make_shared<librados::bufferlist>();
    int rval = 0;
    bool lent = false;
  };
  std::vector<RangeRead*> ranges;  // the caller's ranges of this object
  std::vector<Extent> extents;

  // Groups `ranges` into extents and adds their reads to the operation. A range that needs no
  // bytes (empty, or its end past 2^64 and so past any object) joins no extent.
  void ReadRanges() {
    std::vector<RangeRead*> sorted;
    for (RangeRead* r : ranges) {
      if (!r->dest.empty() && r->dest.size() <= UINT64_MAX - r->offset) sorted.push_back(r);
    }
    std::ranges::sort(sorted, {}, &RangeRead::offset);
    for (RangeRead* r : sorted) {
      const uint64_t end = r->offset + r->dest.size();
      Extent* e = extents.empty() ? nullptr : &extents.back();
      if (e && r->offset - e->offset <= e->length + kMaxExtentGap &&
          end - e->offset <= kMaxExtentBytes) {
        e->length = std::max(e->length, end - e->offset);
      } else {
        e = &extents.emplace_back();
        e->offset = r->offset;
        e->length = r->dest.size();
      }
      e->reads.push_back(r);
    }
    // A range past the end of the object comes back short; the size read with it tells
    // OutOfRange.
    for (Extent& e : extents) op.read(e.offset, e.length, e.bl.get(), &e.rval);
  }
};

}  // namespace objectcache::rados_internal
