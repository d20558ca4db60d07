// What both devices count (DeviceCounters): the driver calls each operation makes (also on the
// stream that takes them) and the bytes it moves each way. Thread-safe.
#pragma once

#include <mutex>

#include "objectcache/device.h"

namespace objectcache::device {

class CallCounter {
 public:
  // `calls` driver calls moving the given bytes; counted on `stream` too when one takes them
  // (a host-side wait has none).
  void Count(Stream* stream, uint64_t calls, uint64_t to_device = 0, uint64_t to_host = 0) {
    if (stream != nullptr) stream->driver_calls += calls;
    std::lock_guard lock(mu_);
    counters_.driver_calls += calls;
    counters_.bytes_to_device += to_device;
    counters_.bytes_to_host += to_host;
  }
  DeviceCounters Get() const {
    std::lock_guard lock(mu_);
    return counters_;
  }

 private:
  mutable std::mutex mu_;
  DeviceCounters counters_;  // guarded by mu_
};

}  // namespace objectcache::device
