#include "s3/socket_deadline.h"

#include <pthread.h>
#include <sys/socket.h>

#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace objectcache::s3 {
namespace {

// How often the watchdog looks at the armed deadlines: a timeout fires up to this late.
constexpr auto kScanEvery = std::chrono::milliseconds(100);

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The one thread that shuts down sockets whose deadline passed. It starts with the first
// watched socket and sleeps while none is watched. Never destroyed: connections held in static
// objects may be closed after other statics are gone.
class SocketWatchdog {
 public:
  static SocketWatchdog& Get() {
    static SocketWatchdog* const watchdog = new SocketWatchdog;
    return *watchdog;
  }

  void Add(SocketDeadline* d, int fd) {
    std::lock_guard lock(mu_);
    d->fd_ = fd;
    d->deadline_ns_.store(0, std::memory_order_relaxed);
    d->fired_.store(false, std::memory_order_relaxed);
    watched_.insert(d);
    if (!running_) {
      running_ = true;
      std::thread([this] { Loop(); }).detach();
    }
    wake_.notify_one();
  }

  void Remove(SocketDeadline* d) {
    std::lock_guard lock(mu_);
    watched_.erase(d);
  }

 private:
  SocketWatchdog() {
    // A child of fork() has no watchdog thread: the next socket it watches starts one. The lock
    // is held across the fork so that the child's copy of it is free.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] {
                     Get().running_ = false;
                     Get().mu_.unlock();
                   });
  }

  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return !watched_.empty(); });
      const int64_t now = NowNs();
      for (SocketDeadline* d : watched_) {
        const int64_t at = d->deadline_ns_.load(std::memory_order_relaxed);
        // The lock keeps d->fd_ open: a connection stops being watched before it closes it.
        if (at != 0 && at <= now && !d->fired_.exchange(true)) ::shutdown(d->fd_, SHUT_RDWR);
      }
      wake_.wait_for(lock, kScanEvery);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::unordered_set<SocketDeadline*> watched_;  // guarded by mu_
  bool running_ = false;                         // guarded by mu_
};

void SocketDeadline::Watch(int fd) {
  Unwatch();
  SocketWatchdog::Get().Add(this, fd);
  watched_ = true;
}

void SocketDeadline::Unwatch() {
  if (!watched_) return;
  SocketWatchdog::Get().Remove(this);
  watched_ = false;
}

void SocketDeadline::Arm() {
  const std::chrono::seconds limit = limit_;
  const int64_t now = NowNs();
  constexpr int64_t kNsPerSecond = 1'000'000'000;
  int64_t at = now;  // a limit of zero or less fires at once
  if (limit.count() > (std::numeric_limits<int64_t>::max() - now) / kNsPerSecond) {
    at = 0;  // past the clock's range: never
  } else if (limit.count() > 0) {
    at = now + limit.count() * kNsPerSecond;
  }
  deadline_ns_.store(at, std::memory_order_relaxed);
}

}  // namespace objectcache::s3
