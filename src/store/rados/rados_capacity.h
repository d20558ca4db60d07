// Capacity for the RADOS backend (rados://POOL?capacity=BYTES; docs/ceph.md, "Capacity"):
// usage accounting shared by every gateway over one namespace, access times kept with the
// objects, and an evictor that keeps the namespace under its capacity by evicting least
// recently used objects found by sampling, as Redis' approximated LRU does.
//
// - Usage: each gateway adds the size changes of its own writes, deletes and evictions to a
//   counter of its own (an omap key of the namespace's control object, written once a tick);
//   usage is the sum of all gateways' counters. Exact integer arithmetic; a gateway that dies
//   loses at most its last tick of changes, and two first writes of one name at once count it
//   twice (both err towards evicting more, never less, except the crash).
// - Access times: oc.atime (decimal seconds) is set at every write and refreshed by a read
//   when older than the resolution, by a write that changes neither the bytes nor oc.gen (a
//   random name of the version), which readers assert instead of the object version: a touch
//   never fails a reader, a replacement always does.
// - Eviction: one gateway at a time (a RADOS lock on the control object, a lease renewed each
//   tick) samples objects from a random hash position of the namespace, reads their access
//   times, and removes the least recently used of each sample, each removal asserting the
//   version it sampled (oc.gen) and an expired pin (oc.pin, decimal seconds, absent: 0), so a
//   chunk replaced or pinned meanwhile stays. Records (names starting with '.') are never
//   evicted. Never a listing of the whole namespace.
#pragma once

#include <rados/librados.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "objectcache/store.h"

namespace objectcache {

inline constexpr char kGenerationXattr[] = "oc.gen";
inline constexpr char kAccessTimeXattr[] = "oc.atime";
inline constexpr char kPinXattr[] = "oc.pin";
// The namespace's control object: the gateways' usage counters (omap) and the evictor's lock.
inline constexpr char kControlObject[] = ".objectcache/capacity";
// Flags of every write and removal: on a full pool (its quota reached, or an OSD full) the OSD
// answers at once (-EDQUOT, -ENOSPC: ResourceExhausted, S3 507) instead of librados holding the
// operation until the pool has room; a removal still goes through, so space can be freed.
inline constexpr int kWriteFlags = librados::OPERATION_FULL_TRY;

struct RadosCapacityOptions {
  uint64_t capacity_bytes = 0;
  int64_t atime_resolution_s = 60;  // reads refresh an access time older than this
  int evict_interval_ms = 1000;     // a tick: publish, renew the lease, evict
  unsigned sample = 16;             // objects read per sample
  unsigned evict_per_sample = 4;    // the least recently used of them evicted
};

class RadosCapacity {
 public:
  // `io` must outlive this (the store owns both). Starts the tick thread.
  RadosCapacity(librados::IoCtx* io, RadosCapacityOptions options);
  ~RadosCapacity();

  const RadosCapacityOptions& options() const { return options_; }
  // The namespace's usage as of the last tick, plus this gateway's changes since.
  StoreUsage Usage() const;
  // A committed change of `bytes` bytes and `objects` objects made by this gateway.
  void Changed(int64_t bytes, int64_t objects) {
    unpublished_bytes_ += bytes;
    unpublished_objects_ += objects;
  }
  // Refreshes `key`'s access time if `atime` (as read with version `gen`) is stale; does not
  // wait. A no-op for objects without a generation (written before capacity was on).
  void TouchIfStale(const std::string& key, const std::string& gen, const std::string& atime);
  // Runs one tick now (tests and benchmarks); true when this gateway held the lease.
  bool Tick();
  uint64_t evictions() const { return evictions_; }

 private:
  void Run();
  void Publish();
  bool HoldLease();
  // One sample, and the removal of its least recently used unpinned objects; how many went.
  size_t EvictFromSample();

  librados::IoCtx* io_;
  const RadosCapacityOptions options_;
  const std::string gateway_;  // this gateway's counter key and lock cookie
  std::atomic<int64_t> unpublished_bytes_{0}, unpublished_objects_{0};
  std::mutex tick_mu_;                     // one tick at a time
  int64_t my_bytes_ = 0, my_objects_ = 0;  // guarded by tick_mu_: this gateway's counter
  std::atomic<int64_t> usage_bytes_{0}, usage_objects_{0};  // all counters, at the last tick
  std::atomic<uint64_t> evictions_{0};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;   // guarded by stop_mu_
  std::thread thread_;  // last: starts after everything it uses
};

// A new random version name for oc.gen.
std::string NewGeneration();
// The current time as oc.atime and oc.pin hold it.
std::string NowSeconds();

}  // namespace objectcache
