// Controller::Impl, the NVMe-KV controller behind Controller (controller.h): its state and
// every step it takes, declared once for the two files that define them: controller.cc (the
// workers, polling, queues, registers, enable and reset) and controller_commands.cc (the admin
// commands and the key-value I/O commands against the store). Internal to src/nvmekv.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <expected>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "nvmekv/controller.h"
#include "nvmekv/spec.h"

namespace objectcache::nvmekv {
namespace controller_internal {

using Clock = std::chrono::steady_clock;

// The store's answer as a completion status.
inline CompletionStatus FromStore(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return Generic(sc::kSuccess);
    case StatusCode::kNotFound:
      return Generic(sc::kKeyDoesNotExist);
    case StatusCode::kAlreadyExists:
      return Generic(sc::kKeyExists);
    case StatusCode::kResourceExhausted:
      return Generic(sc::kCapacityExceeded);
    case StatusCode::kDataLoss:
      return Generic(sc::kUnrecoveredError);
    case StatusCode::kInvalidArgument:
      return Generic(sc::kInvalidField);
    default:
      return Generic(sc::kInternalError);
  }
}

struct Outcome {
  CompletionStatus status;
  uint32_t dw0 = 0;
  uint32_t dw1 = 0;
};
inline Outcome Fail(CompletionStatus s) { return {s, 0, 0}; }

struct CompletionQueue {
  CompletionQueue(uint16_t id, uint32_t size, std::byte* memory)
      : qid(id), entries(size), base(reinterpret_cast<CompletionEntry*>(memory)) {}
  const uint16_t qid;
  const uint32_t entries;
  CompletionEntry* const base;
  std::mutex mu;
  uint32_t tail = 0;  // guarded by mu
  bool phase = true;  // guarded by mu
  int sq_refs = 0;    // submission queues posting here (leader only)
};

struct SubmissionQueue {
  SubmissionQueue(uint16_t id, uint32_t size, std::byte* memory,
                  std::shared_ptr<CompletionQueue> completions)
      : qid(id),
        entries(size),
        base(reinterpret_cast<SubmissionEntry*>(memory)),
        cq(std::move(completions)) {}
  const uint16_t qid;
  const uint32_t entries;
  SubmissionEntry* const base;
  const std::shared_ptr<CompletionQueue> cq;
  std::atomic<uint32_t> head{0};  // written by the leader only
  std::atomic<int> in_flight{0};
  uint32_t last_bad_tail = UINT32_MAX;  // leader only: count a bad doorbell value once
};

struct Command {
  SubmissionEntry entry;
  std::shared_ptr<SubmissionQueue> sq;
};

}  // namespace controller_internal

using controller_internal::Clock;
using controller_internal::Command;
using controller_internal::CompletionQueue;
using controller_internal::Fail;
using controller_internal::FromStore;
using controller_internal::Outcome;
using controller_internal::SubmissionQueue;

class Controller::Impl {
 public:
  Impl(Store* store, ControllerOptions options, SharedMemory memory)
      : store_(store), opt_(std::move(options)), mem_(std::move(memory)) {}

  void Begin() {
    WriteIdentity();
    mem_.Register32(reg::kCsts).store(0, std::memory_order_release);
    granted_io_queues_ = opt_.max_io_queues;
    for (int i = 0; i < opt_.workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  void Stop() {
    {
      std::lock_guard l(mu_);
      if (stopping_.exchange(true)) return;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  const ControllerCounters& counters() const { return counters_; }
  const SharedMemory& memory() const { return mem_; }

 private:
  // Leader/follower: one worker polls at a time; on fetching an I/O command it hands polling
  // on and runs the command.
  void WorkerLoop();

  std::optional<Command> Lead();

  void SawWork();

  // The registers that say what the controller is (CAP, VS).
  void WriteIdentity();

  // A host that resized the segment (an access past a cut was caught, SharedMemory::resizes)
  // or wrote over its descriptor: the segment gets both back, and the identity registers, so
  // the next host can attach; an attached host gets the fatal status. Leader only.
  void RepairSegment();

  // Leader only.
  std::optional<Command> PollOnce();

  std::optional<SubmissionEntry> Fetch(SubmissionQueue& sq);

  // Posts a completion for command `cid` of `sq`, waiting while its completion queue is full:
  // at most opt_.completion_timeout, and never past a stop, a reset or the host's disable
  // (CC.EN = 0). A host that does not drain its queue in that time, or whose head doorbell is
  // outside the queue, gets the controller's fatal status; the completion is dropped. Nothing a
  // host writes can hold a worker, or the leader on the admin queue, for longer.
  void Post(SubmissionQueue& sq, uint16_t cid, const Outcome& o);

  // Queue memory of `entries` entries of `entry_bytes` at `base`: page aligned and inside.
  std::optional<std::byte*> QueueMemory(uint64_t base, uint32_t entries, size_t entry_bytes);
  // The memory a Create I/O Completion/Submission Queue command names for `entries` entries:
  // Invalid Queue Size outside 2..CAP.MQES+1, Invalid Field unless physically contiguous and
  // inside the queue region.
  std::expected<std::byte*, Outcome> IoQueueMemory(const SubmissionEntry& e, uint32_t entries,
                                                   size_t entry_bytes);

  std::optional<std::span<std::byte>> Data(uint64_t offset, uint64_t length);

  void Enable(uint32_t cc);

  void WaitIdle();

  // CC.EN 1 -> 0: every queue goes; in-flight commands finish first (their completions are
  // dropped if they would have to wait for room).
  // The host broke its side of a queue: the controller's fatal status (CSTS.CFS) until the host
  // resets it; no command is fetched meanwhile.
  void FailHost();
  void MarkFatal();

  void Reset();

  Outcome RunAdmin(const SubmissionEntry& e);

  Outcome Identify(const SubmissionEntry& e);

  Outcome SetFeatures(const SubmissionEntry& e);

  Outcome GetFeatures(const SubmissionEntry& e);

  bool ValidIoQueueId(uint16_t qid) const { return qid >= 1 && qid <= granted_io_queues_; }

  Outcome CreateCq(const SubmissionEntry& e);

  Outcome CreateSq(const SubmissionEntry& e);

  // Commands already fetched from the queue finish (and post) before the deletion completes.
  Outcome DeleteSq(const SubmissionEntry& e);

  Outcome DeleteCq(const SubmissionEntry& e);

  Outcome RunIo(const SubmissionEntry& e);

  Outcome StoreValue(const SubmissionEntry& e, const std::string& name);

  Outcome Retrieve(const SubmissionEntry& e, const std::string& name);

  Outcome RetrieveRange(const SubmissionEntry& e, const std::string& name);

  // Keys from `start` (inclusive) in byte order, as many whole ones as the buffer holds.
  Outcome List(const SubmissionEntry& e, const Key& start);

  Store* store_;
  ControllerOptions opt_;
  SharedMemory mem_;
  ControllerCounters counters_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool leader_taken_ = false;  // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> resetting_{false};
  std::atomic<bool> host_failed_{false};  // set by FailHost, cleared by Reset

  // The leader's state: only the thread that is leader touches it (the hand-off through mu_
  // orders one leader's writes before the next's reads).
  std::array<std::shared_ptr<SubmissionQueue>, kMaxQueues> sqs_;
  std::array<std::shared_ptr<CompletionQueue>, kMaxQueues> cqs_;
  std::vector<uint16_t> active_;  // I/O submission queues, polled round robin
  size_t next_ = 0;
  bool enabled_ = false, fatal_ = false, shut_down_ = false, queues_created_ = false;
  uint64_t seen_resizes_ = 0;  // leader only
  uint16_t granted_io_queues_ = 0;
  std::atomic<bool> delete_missing_fails_{false};  // read by workers
  Clock::time_point last_work_ = Clock::now();
  std::chrono::microseconds sleep_{1};
};

}  // namespace objectcache::nvmekv
