// SocketDeadline: a time limit for the blocking calls on one socket.
//
// Boost.Beast's tcp_stream applies its timeouts to asynchronous operations only; a blocking
// connect, read or write waits as long as the peer lets it (forever, for a server that accepts
// and then says nothing). A connection arms its deadline before each blocking step and disarms
// it after; one watchdog thread for the whole process shuts the socket down once an armed
// deadline has passed, which ends the blocked call with an error, and fired() tells the
// connection that the error was the timeout. Arming is an atomic store: nothing on the data path
// waits for the watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace objectcache::s3 {

class SocketDeadline {
 public:
  // Each armed step may take up to `limit` (zero or less: none may wait; past the steady
  // clock's range: no limit).
  explicit SocketDeadline(std::chrono::seconds limit) : limit_(limit) {}
  ~SocketDeadline() { Unwatch(); }
  SocketDeadline(const SocketDeadline&) = delete;
  SocketDeadline& operator=(const SocketDeadline&) = delete;

  // Starts watching `fd`, disarmed; it must stay open until Unwatch. Replaces a previous fd.
  void Watch(int fd);
  // Stops watching (call before the socket is closed; the watchdog never touches it after).
  void Unwatch();

  // The socket is shut down if a blocking step is still under way the limit from now.
  void Arm();
  void Disarm() { deadline_ns_.store(0, std::memory_order_relaxed); }
  std::chrono::seconds limit() const { return limit_; }

  // Whether the watchdog shut the socket down since it was watched.
  bool fired() const { return fired_.load(std::memory_order_relaxed); }

 private:
  friend class SocketWatchdog;
  const std::chrono::seconds limit_;
  int fd_ = -1;  // guarded by the watchdog's lock while watched
  bool watched_ = false;
  std::atomic<int64_t> deadline_ns_{0};  // steady clock; 0: disarmed
  std::atomic<bool> fired_{false};
};

}  // namespace objectcache::s3
