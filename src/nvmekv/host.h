// The host initiator for the NVMe-KV controller (controller.h): it attaches to the controller's
// shared memory as the one host driver (an advisory lock on the segment), resets and enables the
// controller, creates I/O queue pairs, and submits commands.
//
// A QueuePair may be used by many threads at once, the way BaM's GPU queues are: a thread takes a
// ticket for a submission slot, waits until that slot is free, writes its entry and marks it;
// whichever thread holds the tail lock moves the tail over every marked slot and writes the
// doorbell once for all of them. Completions are read by whichever waiting thread holds the
// completion lock: it checks the phase tag with an acquire load (the fence) before it reads the
// rest of the entry, hands each completion to the thread that waits on its command id, and
// writes the head doorbell once per pass. Every wait has a deadline: a controller that is gone
// gives DeadlineExceeded, never a hang.
//
// Data pointers are offsets into the controller's data region; DataBuffer is a piece of it
// (Host::Allocate), like DMA-able memory. After a timeout the controller may still write into a
// command's buffer: free it only after Detach.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nvmekv/shared_memory.h"
#include "nvmekv/spec.h"
#include "objectcache/status.h"

namespace objectcache::nvmekv {

struct HostOptions {
  std::string shm_name = "objectcache-nvme-kv";
  uint16_t io_queues = 1;
  uint32_t queue_entries = 256;             // per queue; at most the controller's CAP.MQES + 1
  std::chrono::milliseconds timeout{5000};  // per command
};

// A queue pair's memory and doorbells, for an initiator outside this library (the GPU one).
struct RawQueuePair {
  uint16_t qid = 0;
  uint32_t entries = 0;
  SubmissionEntry* sq = nullptr;
  CompletionEntry* cq = nullptr;
  uint32_t* sq_tail_doorbell = nullptr;
  uint32_t* cq_head_doorbell = nullptr;
  std::byte* data_region = nullptr;  // data pointer 0
  // Where the queue stands when taken over: the next submission slot, the next completion slot
  // and the phase tag expected there.
  uint32_t sq_tail = 0;
  uint32_t cq_head = 0;
  bool cq_phase = true;
};

class QueuePair {
 public:
  QueuePair(const SharedMemory& memory, uint16_t qid, uint32_t entries, uint64_t sq_offset,
            uint64_t cq_offset, std::chrono::milliseconds timeout);

  // Runs `entry` (its command id is set here) and returns its completion, whatever its status.
  // DeadlineExceeded when no completion comes within the timeout; Unavailable once the queue
  // is unusable (a submission slot was never freed: the controller is gone).
  Result<CompletionEntry> Execute(SubmissionEntry entry);
  // Runs `entries` with one doorbell write when the queue has room for all of them (one per
  // wait for room otherwise); out[i] is the completion of entries[i].
  Status ExecuteBatch(std::span<const SubmissionEntry> entries, std::span<CompletionEntry> out);

  // Asynchronous use, for callers that keep commands in flight: Submit places `entries` and
  // rings the doorbell once, and ids[i] is entries[i]'s command id; Poll returns a command's
  // completion once it has come (reading the completion queue if no other thread is) and then
  // frees its id. At most entries() commands may be in flight: with no free id Submit fails
  // with ResourceExhausted, having submitted none of `entries`.
  Status Submit(std::span<const SubmissionEntry> entries, std::span<uint16_t> ids);
  std::optional<CompletionEntry> Poll(uint16_t cid);

  uint16_t id() const { return qid_; }
  uint32_t entries() const { return entries_; }
  uint64_t doorbell_writes() const { return doorbells_.load(); }
  uint64_t commands() const { return commands_.load(); }
  // For a device initiator that takes this queue over: no call above may be in flight or be
  // made meanwhile.
  RawQueuePair raw() const;

 private:
  using Clock = std::chrono::steady_clock;
  enum : uint32_t { kFree = 0, kBusy = 1, kDone = 2, kAbandoned = 3 };
  struct CommandSlot {
    std::atomic<uint32_t> state{kFree};
    // Written by the draining thread before `state` becomes kDone (release), read by the owner
    // after (acquire). Atomic words, so that no reading of it can be torn whatever the order
    // (and so that ThreadSanitizer, which cannot see that the controller's mapping and ours are
    // one memory, sees no race between two owners of the id in turn).
    std::array<std::atomic<uint32_t>, 4> completion{};
    void Put(const CompletionEntry& c) {
      for (size_t i = 0; i < 4; ++i) completion[i].store(c.dw[i], std::memory_order_relaxed);
    }
    CompletionEntry Take() const {
      CompletionEntry c;
      for (size_t i = 0; i < 4; ++i) c.dw[i] = completion[i].load(std::memory_order_relaxed);
      return c;
    }
  };

  Result<uint16_t> AcquireCommandId(Clock::time_point deadline, bool wait);
  Status Place(SubmissionEntry entry, Clock::time_point deadline);
  void Publish();
  void TryDrain();
  Result<CompletionEntry> Await(uint16_t cid, Clock::time_point deadline);
  // No one will wait for `cid`: it is freed when its completion comes (now, if it has).
  void Abandon(uint16_t cid);
  Status TimeoutError(std::string_view waiting_for) const;
  // Unavailable: a submitter timed out holding a ticket, so the tail can never pass it.
  Status UnusableError() const;

  const SharedMemory& mem_;
  const uint16_t qid_;
  const uint32_t entries_;
  SubmissionEntry* const sq_;
  CompletionEntry* const cq_;
  const std::chrono::milliseconds timeout_;

  std::atomic<uint64_t> sq_ticket_{0};  // next submission ticket
  std::atomic<uint64_t> sq_tail_{0};    // tickets published by a doorbell write
  std::atomic<uint64_t> sq_head_{0};    // tickets the controller has fetched (from CQE DW2)
  std::unique_ptr<std::atomic<uint64_t>[]> ready_;  // slot i holds ticket + 1 once written
  std::atomic<bool> tail_lock_{false};
  std::atomic<bool> cq_lock_{false};
  uint32_t cq_head_ = 0;  // guarded by cq_lock_
  bool cq_phase_ = true;  // guarded by cq_lock_
  std::unique_ptr<CommandSlot[]> commands_by_id_;
  std::atomic<uint64_t> cid_ticket_{0};
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> doorbells_{0}, commands_{0};
};

class DataAllocator;

// A piece of the controller's data region, returned to its allocator when destroyed.
class DataBuffer {
 public:
  DataBuffer() = default;
  DataBuffer(DataAllocator* owner, uint64_t offset, std::span<std::byte> bytes)
      : owner_(owner), offset_(offset), bytes_(bytes) {}
  DataBuffer(DataBuffer&& o) noexcept { *this = std::move(o); }
  DataBuffer& operator=(DataBuffer&& o) noexcept;
  ~DataBuffer();

  uint64_t offset() const { return offset_; }  // the data pointer for commands
  std::span<std::byte> bytes() const { return bytes_; }

 private:
  DataAllocator* owner_ = nullptr;
  uint64_t offset_ = 0;
  std::span<std::byte> bytes_;
};

// First fit over the data region in pages. Thread-safe.
class DataAllocator {
 public:
  explicit DataAllocator(std::span<std::byte> region);
  Result<DataBuffer> Allocate(size_t bytes);
  void Free(uint64_t offset, size_t bytes);

 private:
  std::span<std::byte> region_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, guarded by mu_
};

class Host {
 public:
  // Attaches to the controller at options.shm_name. FailedPrecondition when another host is
  // attached or the controller refuses to become ready; NotFound when there is no controller.
  static Result<std::unique_ptr<Host>> Attach(const HostOptions& options);
  // Deletes the I/O queues, shuts the controller down normally and disables it (bounded waits:
  // a controller that is gone is left as it is).
  ~Host();

  QueuePair& admin_queue() { return *admin_; }
  QueuePair& io_queue(size_t i) { return *io_[i]; }
  size_t io_queue_count() const { return io_.size(); }
  Result<DataBuffer> Allocate(size_t bytes) { return allocator_->Allocate(bytes); }
  std::span<std::byte> data_region() const { return mem_.data_region(); }
  const ControllerIdentity& identity() const { return identity_; }
  uint32_t max_queue_entries() const { return max_queue_entries_; }
  // Identify Namespace (KV command set): capacity, use, key and value limits.
  Result<KeyValueNamespace> IdentifyNamespace();
  // Runs an admin command with an optional 4 KiB data buffer.
  Result<CompletionEntry> Admin(SubmissionEntry entry);
  const SharedMemory& memory() const { return mem_; }

 private:
  explicit Host(SharedMemory mem) : mem_(std::move(mem)) {}
  Status Start(const HostOptions& options);

  SharedMemory mem_;
  std::unique_ptr<DataAllocator> allocator_;
  std::unique_ptr<QueuePair> admin_;
  std::vector<std::unique_ptr<QueuePair>> io_;
  ControllerIdentity identity_;
  uint32_t max_queue_entries_ = 0;
};

// Key-value commands with canonical errors: NotFound (Key Does Not Exist), AlreadyExists (Key
// Exists), ResourceExhausted (Capacity Exceeded), DataLoss (Unrecovered Error),
// InvalidArgument (Invalid Value Size, Invalid Key Size, Invalid Field), Internal otherwise;
// the message names the command, the key and the status.
Status CompletionStatusToStatus(const CompletionEntry& c, std::string_view what);
Status KvStore(QueuePair& q, const Key& key, const DataBuffer& value, uint32_t size,
               uint8_t options = 0);
// Returns the whole value's size; the first min(size, buffer_size) bytes are in `buffer`.
Result<uint32_t> KvRetrieve(QueuePair& q, const Key& key, const DataBuffer& buffer,
                            uint32_t buffer_size);
// Returns the bytes transferred: `length` unless the value ends first.
Result<uint32_t> KvRetrieveRange(QueuePair& q, const Key& key, const DataBuffer& buffer,
                                 uint32_t length, uint64_t offset);
Result<bool> KvExist(QueuePair& q, const Key& key);
Status KvDelete(QueuePair& q, const Key& key);
Result<std::vector<Key>> KvList(QueuePair& q, const Key& start, const DataBuffer& buffer,
                                uint32_t buffer_size);

}  // namespace objectcache::nvmekv
