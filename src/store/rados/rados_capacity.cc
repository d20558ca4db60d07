#include "store/rados/rados_capacity.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace objectcache {
namespace {

constexpr char kEvictorLock[] = "evictor";
constexpr char kCounterPrefix[] = "usage.";

uint64_t Random64() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

int64_t ParseI64(std::string_view s) {
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

librados::bufferlist Text(std::string_view s) {
  librados::bufferlist bl;
  bl.append(s.data(), s.size());
  return bl;
}

// A fire-and-forget write: the operation and its completion live until it is done.
struct Touch {
  librados::ObjectWriteOperation op;
  librados::AioCompletion* done = nullptr;
  static void Finished(librados::completion_t, void* arg) {
    Touch* t = static_cast<Touch*>(arg);
    t->done->release();
    delete t;
  }
};

}  // namespace

std::string NewGeneration() {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Random64()));
  return buf;
}

std::string NowSeconds() { return std::to_string(static_cast<int64_t>(std::time(nullptr))); }

RadosCapacity::RadosCapacity(librados::IoCtx* io, RadosCapacityOptions options)
    : io_(io), options_(options), gateway_(NewGeneration()) {
  Publish();
  thread_ = std::thread([this] { Run(); });
}

RadosCapacity::~RadosCapacity() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  Publish();  // this gateway's last changes
  io_->unlock(kControlObject, kEvictorLock, gateway_);
}

StoreUsage RadosCapacity::Usage() const {
  const int64_t bytes = usage_bytes_ + unpublished_bytes_;
  const int64_t objects = usage_objects_ + unpublished_objects_;
  return {.objects = static_cast<uint64_t>(std::max<int64_t>(0, objects)),
          .bytes = static_cast<uint64_t>(std::max<int64_t>(0, bytes)),
          .evictions = evictions_};
}

void RadosCapacity::Run() {
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(options_.evict_interval_ms),
                            [this] { return stop_; })) {
    lock.unlock();
    Tick();
    lock.lock();
  }
}

void RadosCapacity::Publish() {
  // This gateway's counter, then everyone's: usage as of now.
  const int64_t bytes = unpublished_bytes_.exchange(0);
  const int64_t objects = unpublished_objects_.exchange(0);
  my_bytes_ += bytes;
  my_objects_ += objects;
  if (bytes != 0 || objects != 0 || my_bytes_ == 0) {
    std::map<std::string, librados::bufferlist> mine;
    mine[kCounterPrefix + gateway_] =
        Text(std::to_string(my_bytes_) + " " + std::to_string(my_objects_));
    librados::ObjectWriteOperation op;
    op.omap_set(mine);
    if (io_->operate(kControlObject, &op, kWriteFlags) < 0) {
      // Not published: counted again at the next tick.
      my_bytes_ -= bytes;
      my_objects_ -= objects;
      unpublished_bytes_ += bytes;
      unpublished_objects_ += objects;
    }
  }
  int64_t total_bytes = 0, total_objects = 0;
  std::string after;
  for (;;) {
    std::map<std::string, librados::bufferlist> page;
    bool more = false;
    if (io_->omap_get_vals2(kControlObject, after, kCounterPrefix, 1000, &page, &more) < 0) {
      return;  // the cluster did not answer: keep the last sum
    }
    for (auto& [key, value] : page) {
      const std::string text(value.c_str(), value.length());
      const size_t space = text.find(' ');
      total_bytes += ParseI64(std::string_view(text).substr(0, space));
      if (space != std::string::npos)
        total_objects += ParseI64(std::string_view(text).substr(space + 1));
      after = key;
    }
    if (!more || page.empty()) break;
  }
  usage_bytes_ = total_bytes;
  usage_objects_ = total_objects;
}

bool RadosCapacity::HoldLease() {
  struct timeval lease {};
  const int ms = 3 * options_.evict_interval_ms;
  lease.tv_sec = ms / 1000;
  lease.tv_usec = (ms % 1000) * 1000;
  return io_->lock_exclusive(kControlObject, kEvictorLock, gateway_, "objectcache evictor", &lease,
                             LIBRADOS_LOCK_FLAG_MAY_RENEW) == 0;
}

bool RadosCapacity::Tick() {
  std::lock_guard lock(tick_mu_);
  Publish();
  if (!HoldLease()) return false;
  // Evict until under the capacity, within a tick's worth of samples (the next tick goes on).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.evict_interval_ms);
  while (Usage().bytes > options_.capacity_bytes && std::chrono::steady_clock::now() < deadline) {
    if (EvictFromSample() == 0) break;
  }
  Publish();
  return true;
}

size_t RadosCapacity::EvictFromSample() {
  // Names from a random position of the hash order, records left out.
  std::vector<std::string> names;
  try {
    librados::NObjectIterator it = io_->nobjects_begin();
    it.seek(static_cast<uint32_t>(Random64()));
    for (bool wrapped = false; names.size() < options_.sample;) {
      if (it == io_->nobjects_end()) {
        if (wrapped) break;
        wrapped = true;
        it = io_->nobjects_begin();
        continue;
      }
      if (!IsRecordName(it->get_oid()) &&
          std::find(names.begin(), names.end(), it->get_oid()) == names.end()) {
        names.push_back(it->get_oid());
      }
      ++it;
    }
  } catch (const std::exception&) {
    return 0;  // the cluster did not answer: the next tick tries again
  }
  struct Candidate {
    std::string name;
    uint64_t size = 0;
    time_t mtime = 0;
    int stat_rval = 0;
    librados::bufferlist gen, atime, pin;
    int gen_rval = 0, atime_rval = 0, pin_rval = 0;
    librados::ObjectReadOperation op;
    std::unique_ptr<librados::AioCompletion, void (*)(librados::AioCompletion*)> done{
        librados::Rados::aio_create_completion(), [](librados::AioCompletion* c) { c->release(); }};
  };
  std::vector<std::unique_ptr<Candidate>> sample;
  for (const std::string& name : names) {
    auto c = std::make_unique<Candidate>();
    c->name = name;
    c->op.stat(&c->size, &c->mtime, &c->stat_rval);
    c->op.getxattr(kGenerationXattr, &c->gen, &c->gen_rval);
    c->op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
    c->op.getxattr(kAccessTimeXattr, &c->atime, &c->atime_rval);
    c->op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
    c->op.getxattr(kPinXattr, &c->pin, &c->pin_rval);
    c->op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
    if (io_->aio_operate(name, c->done.get(), &c->op, nullptr) == 0) sample.push_back(std::move(c));
  }
  const int64_t now = std::time(nullptr);
  std::vector<std::pair<int64_t, Candidate*>> evictable;  // (access time, candidate)
  for (auto& c : sample) {
    c->done->wait_for_complete();
    if (c->done->get_return_value() < 0 || c->gen_rval < 0 || c->gen.length() == 0) continue;
    const int64_t pinned_until =
        c->pin_rval < 0 ? 0 : ParseI64(std::string_view(c->pin.c_str(), c->pin.length()));
    if (pinned_until >= now) continue;
    const int64_t atime = c->atime_rval < 0
                              ? static_cast<int64_t>(c->mtime)
                              : ParseI64(std::string_view(c->atime.c_str(), c->atime.length()));
    evictable.emplace_back(atime, c.get());
  }
  std::sort(evictable.begin(), evictable.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t evicted = 0;
  for (size_t i = 0; i < evictable.size() && i < options_.evict_per_sample; ++i) {
    Candidate& c = *evictable[i].second;
    // Only the version sampled, and only while unpinned (a pin made since sets oc.pin to a
    // time not before now; an absent oc.pin reads as 0).
    librados::ObjectWriteOperation op;
    op.cmpxattr(kGenerationXattr, LIBRADOS_CMPXATTR_OP_EQ, c.gen);
    op.cmpxattr(kPinXattr, LIBRADOS_CMPXATTR_OP_GT, static_cast<uint64_t>(now));
    op.remove();
    if (io_->operate(c.name, &op, kWriteFlags) == 0) {
      Changed(-static_cast<int64_t>(c.size), -1);
      evictions_++;
      evicted++;
    }
  }
  return evicted;
}

void RadosCapacity::TouchIfStale(const std::string& key, const std::string& gen,
                                 const std::string& atime) {
  if (gen.empty()) return;
  const int64_t now = std::time(nullptr);
  if (!atime.empty() && now - ParseI64(atime) < options_.atime_resolution_s) return;
  auto* t = new Touch;
  t->op.cmpxattr(kGenerationXattr, LIBRADOS_CMPXATTR_OP_EQ, Text(gen));
  t->op.setxattr(kAccessTimeXattr, Text(std::to_string(now)));
  t->done = librados::Rados::aio_create_completion(t, &Touch::Finished);
  if (io_->aio_operate(key, t->done, &t->op, kWriteFlags) < 0) {
    t->done->release();
    delete t;
  }
}

}  // namespace objectcache
