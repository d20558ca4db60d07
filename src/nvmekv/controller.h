// A userspace NVMe controller exporting one key-value namespace (command set 01h) over any
// Store. The host side is shared memory (shared_memory.h): the host writes submission entries
// and rings doorbells; the controller polls the doorbells, runs the commands against the store
// and posts completion entries with the phase tag. docs/nvme-kv.md says what it implements.
//
// Threads: `workers` threads take turns as the poller (leader/follower): the leader polls the
// doorbells, handles the admin queue itself, and on fetching an I/O command hands the polling
// to a waiting worker and runs the command, so commands run concurrently against the store and
// a command at queue depth 1 pays no hand-off. Commands of one queue may complete in any order
// (the Key Value Command Set orders nothing). While idle the poller spins for `busy_poll`, then
// sleeps, doubling from `poll_interval` up to 50 us while a command came in the last 10 ms, and
// up to `max_poll_interval` after that.
//
// A key of L bytes is the store object `name_prefix` + its 2L lowercase hex digits, so a
// 16-byte chunk key is the name the S3 gateway gives that chunk under `--prefix BUCKET/`.
//
// Thread-safe: Stop and counters may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "nvmekv/shared_memory.h"
#include "objectcache/store.h"

namespace objectcache::nvmekv {

struct ControllerOptions {
  std::string shm_name = "objectcache-nvme-kv";
  bool replace_existing = false;      // unlink a stale segment of the same name first
  std::string name_prefix;            // store names are name_prefix + hex(key)
  uint16_t max_io_queues = 16;        // at most kMaxQueues - 1
  uint32_t max_queue_entries = 1024;  // CAP.MQES + 1, 2..4096
  size_t data_bytes = size_t{256} << 20;
  uint32_t max_value_bytes = 64u << 20;  // larger Stores get Invalid Value Size
  int workers = 8;
  std::chrono::microseconds busy_poll{1000};
  std::chrono::microseconds poll_interval{10};
  std::chrono::microseconds max_poll_interval{1000};
  // A completion queue full for this long (its host does not read its completions) puts the
  // controller in its fatal status, as does a completion queue head doorbell outside the queue:
  // the completion is dropped and the host must reset (CC.EN = 0), which always completes.
  std::chrono::milliseconds completion_timeout{2000};
};

struct ControllerCounters {
  std::atomic<uint64_t> io_commands{0};
  std::atomic<uint64_t> admin_commands{0};
  std::atomic<uint64_t> errors{0};         // completions with a status other than success
  std::atomic<uint64_t> bad_doorbells{0};  // doorbell values outside their queue
  std::atomic<uint64_t> host_failures{0};  // fatal statuses for a host that broke its queues
  // The shared segment resized by a host (or its descriptor overwritten): given back its size
  // and descriptor, the host failed (SharedMemory::Restore)
  std::atomic<uint64_t> segment_repairs{0};
  std::atomic<uint64_t> enables{0};  // CC.EN 0 -> 1 transitions that reached ready
};

class Controller {
 public:
  // Creates the shared memory and starts the workers. `store` must outlive the controller.
  static Result<std::unique_ptr<Controller>> Start(Store* store, ControllerOptions options);
  // Stops the workers (in-flight commands finish; no completion is posted after) and unlinks the
  // shared memory.
  ~Controller();

  void Stop();
  const ControllerCounters& counters() const;
  const SharedMemory& memory() const;

  class Impl;

 private:
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace objectcache::nvmekv
