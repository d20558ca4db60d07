#include "nvmekv/host.h"

#include <signal.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace objectcache::nvmekv {
namespace {

using Clock = std::chrono::steady_clock;

Status DeadlineError(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}

// Waits until pred() or the deadline; false on the deadline.
template <typename Pred>
bool WaitUntil(Clock::time_point deadline, Pred pred) {
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

const char* OpcodeName(uint8_t op) {
  switch (op) {
    case kv::kStore:
      return "Store";
    case kv::kRetrieve:
      return "Retrieve";
    case kv::kRetrieveRange:
      return "Retrieve Range";
    case kv::kList:
      return "List";
    case kv::kDelete:
      return "Delete";
    case kv::kExist:
      return "Exist";
    default:
      return "command";
  }
}

}  // namespace

QueuePair::QueuePair(const SharedMemory& memory, uint16_t qid, uint32_t entries, uint64_t sq_offset,
                     uint64_t cq_offset, std::chrono::milliseconds timeout)
    : mem_(memory),
      qid_(qid),
      entries_(entries),
      sq_(reinterpret_cast<SubmissionEntry*>(memory.queue_memory().data() + sq_offset)),
      cq_(reinterpret_cast<CompletionEntry*>(memory.queue_memory().data() + cq_offset)),
      timeout_(timeout),
      ready_(new std::atomic<uint64_t>[entries]),
      commands_by_id_(new CommandSlot[entries]) {
  for (uint32_t i = 0; i < entries; ++i) ready_[i].store(0);
}

RawQueuePair QueuePair::raw() const {
  RawQueuePair r;
  r.qid = qid_;
  r.entries = entries_;
  r.sq = sq_;
  r.cq = cq_;
  r.sq_tail_doorbell =
      reinterpret_cast<uint32_t*>(mem_.base() + SqTailDoorbell(qid_, kDoorbellStride));
  r.cq_head_doorbell =
      reinterpret_cast<uint32_t*>(mem_.base() + CqHeadDoorbell(qid_, kDoorbellStride));
  r.data_region = mem_.data_region().data();
  r.sq_tail = static_cast<uint32_t>(sq_tail_.load() % entries_);
  r.cq_head = cq_head_;
  r.cq_phase = cq_phase_;
  return r;
}

Status QueuePair::UnusableError() const {
  return UnavailableError("NVMe-KV queue " + std::to_string(qid_) +
                          " is unusable after a timeout: attach again");
}

Status QueuePair::TimeoutError(std::string_view waiting_for) const {
  pid_t pid = static_cast<pid_t>(mem_.descriptor().controller_pid);
  std::string why = (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
                        ? "its process " + std::to_string(pid) + " is gone"
                        : "no answer in " + std::to_string(timeout_.count()) + " ms";
  return DeadlineError("NVMe-KV queue " + std::to_string(qid_) + " of " + mem_.name() +
                       ": waiting for " + std::string(waiting_for) + ": " + why);
}

Result<uint16_t> QueuePair::AcquireCommandId(Clock::time_point deadline, bool wait) {
  for (uint32_t tries = 1;; ++tries) {
    uint16_t id = static_cast<uint16_t>(cid_ticket_.fetch_add(1) % entries_);
    uint32_t expected = kFree;
    if (commands_by_id_[id].state.compare_exchange_strong(expected, kBusy)) return id;
    if (tries % entries_ == 0) {
      if (!wait) return UnavailableError("no free command id");
      TryDrain();
      if (Clock::now() > deadline) return TimeoutError("a free command id");
      std::this_thread::yield();
    }
  }
}

Status QueuePair::Place(SubmissionEntry entry, Clock::time_point deadline) {
  uint64_t ticket = sq_ticket_.fetch_add(1);
  // The slot is free once the controller has fetched the entry `entries_` tickets back; the SQ
  // never holds more than entries_ - 1.
  while (ticket >= sq_head_.load() + entries_ - 1) {
    Publish();
    TryDrain();
    if (Clock::now() > deadline) {
      broken_ = true;  // this ticket will never be written: the tail cannot pass it
      return TimeoutError("a free submission slot");
    }
    std::this_thread::yield();
  }
  std::memcpy(sq_ + ticket % entries_, &entry, sizeof entry);
  ready_[ticket % entries_].store(ticket + 1);
  commands_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

// Moves the tail over every written slot and writes the doorbell once. A thread that finds the
// lock taken leaves its slot to the holder, who looks again after letting go (sequentially
// consistent atomics: either the holder sees the slot or the thread gets the lock).
void QueuePair::Publish() {
  for (;;) {
    if (tail_lock_.exchange(true)) return;
    uint64_t start = sq_tail_.load(), tail = start;
    while (ready_[tail % entries_].load() == tail + 1) ++tail;
    if (tail != start) {
      sq_tail_.store(tail);
      mem_.Register32(SqTailDoorbell(qid_, kDoorbellStride))
          .store(static_cast<uint32_t>(tail % entries_), std::memory_order_release);
      doorbells_.fetch_add(1, std::memory_order_relaxed);
    }
    tail_lock_.store(false);
    if (ready_[tail % entries_].load() != tail + 1) return;
  }
}

void QueuePair::TryDrain() {
  if (cq_lock_.exchange(true, std::memory_order_acquire)) return;
  uint32_t drained = 0;
  for (;;) {
    CompletionEntry* slot = cq_ + cq_head_;
    // The phase tag first, with acquire: the rest of the entry is read only after it (a stale
    // DW0 with a fresh phase would be a torn completion).
    uint32_t dw3 = mem_.Word32(&slot->dw[3]).load(std::memory_order_acquire);
    if (static_cast<bool>((dw3 >> 16) & 1) != cq_phase_) break;
    CompletionEntry c;
    c.dw = {slot->dw[0], slot->dw[1], slot->dw[2], dw3};
    uint16_t h = c.sq_head();
    uint64_t head = sq_head_.load();
    uint64_t advanced = head + (h + entries_ - head % entries_) % entries_;
    if (h < entries_ && advanced <= sq_tail_.load()) sq_head_.store(advanced);
    uint16_t cid = c.command_id();
    // A completion for an id with no command (free, or already completed) is ignored: only the
    // drainer writes a slot's completion, and only while its command waits for it.
    if (cid < entries_) {
      CommandSlot& s = commands_by_id_[cid];
      uint32_t state = s.state.load(std::memory_order_acquire);
      if (state == kBusy) {
        s.Put(c);
        uint32_t expected = kBusy;
        if (!s.state.compare_exchange_strong(expected, kDone, std::memory_order_acq_rel)) {
          state = expected;  // its waiter gave up meanwhile
        }
      }
      if (state == kAbandoned) {
        s.state.store(kFree, std::memory_order_release);  // its waiter timed out: id reusable
      }
    }
    if (++cq_head_ == entries_) {
      cq_head_ = 0;
      cq_phase_ = !cq_phase_;
    }
    ++drained;
  }
  if (drained > 0) {
    mem_.Register32(CqHeadDoorbell(qid_, kDoorbellStride))
        .store(cq_head_, std::memory_order_release);
  }
  cq_lock_.store(false, std::memory_order_release);
}

Result<CompletionEntry> QueuePair::Await(uint16_t cid, Clock::time_point deadline) {
  CommandSlot& s = commands_by_id_[cid];
  for (uint32_t spins = 0;; ++spins) {
    if (s.state.load(std::memory_order_acquire) == kDone) {
      CompletionEntry c = s.Take();
      s.state.store(kFree, std::memory_order_release);
      return c;
    }
    TryDrain();
    if (s.state.load(std::memory_order_acquire) == kDone) continue;
    if (spins % 64 == 63 && Clock::now() > deadline) {
      uint32_t expected = kBusy;
      if (s.state.compare_exchange_strong(expected, kAbandoned)) {
        return TimeoutError("command " + std::to_string(cid));
      }
      continue;  // it completed just now
    }
    if (spins > 16) std::this_thread::yield();  // two cores: let the controller run
  }
}

void QueuePair::Abandon(uint16_t cid) {
  uint32_t expected = kBusy;
  if (!commands_by_id_[cid].state.compare_exchange_strong(expected, kAbandoned) &&
      expected == kDone) {
    commands_by_id_[cid].state.store(kFree);
  }
}

Result<CompletionEntry> QueuePair::Execute(SubmissionEntry entry) {
  CompletionEntry c;
  OC_RETURN_IF_ERROR(ExecuteBatch(std::span(&entry, 1), std::span(&c, 1)));
  return c;
}

Status QueuePair::ExecuteBatch(std::span<const SubmissionEntry> entries,
                               std::span<CompletionEntry> out) {
  if (out.size() < entries.size()) return InvalidArgumentError("fewer completions than entries");
  if (broken_) return UnusableError();
  Clock::time_point deadline = Clock::now() + timeout_;
  std::vector<uint16_t> ids;
  ids.reserve(entries.size());
  size_t awaited = 0;
  // Waits for the placed commands, freeing their ids.
  auto flush = [&]() -> Status {
    Publish();
    for (; awaited < ids.size(); ++awaited) {
      Result<CompletionEntry> c = Await(ids[awaited], deadline);
      if (!c.ok()) {
        // Nobody waits for the rest: their ids come free when (if) their completions come.
        for (size_t i = awaited + 1; i < ids.size(); ++i) Abandon(ids[i]);
        return c.status();
      }
      out[awaited] = *c;
    }
    return Status::Ok();
  };
  for (const SubmissionEntry& e : entries) {
    // Hold no ids while waiting for one: two batches each holding half the ids would wait on
    // each other.
    Result<uint16_t> id = AcquireCommandId(deadline, /*wait=*/false);
    if (!id.ok()) {
      OC_RETURN_IF_ERROR(flush());
      id = AcquireCommandId(deadline, /*wait=*/true);
      if (!id.ok()) return id.status();
    }
    SubmissionEntry placed = e;
    placed.set_command_id(*id);
    ids.push_back(*id);
    Status s = Place(placed, deadline);
    if (!s.ok()) {
      commands_by_id_[*id].state.store(kFree);
      ids.pop_back();
      for (size_t i = awaited; i < ids.size(); ++i) Abandon(ids[i]);
      return s;
    }
  }
  return flush();
}

Status QueuePair::Submit(std::span<const SubmissionEntry> entries, std::span<uint16_t> ids) {
  if (ids.size() < entries.size()) return InvalidArgumentError("fewer ids than entries");
  if (broken_) return UnusableError();
  Clock::time_point deadline = Clock::now() + timeout_;
  for (size_t i = 0; i < entries.size(); ++i) {
    Result<uint16_t> id = AcquireCommandId(deadline, /*wait=*/false);
    if (!id.ok()) {
      for (size_t j = 0; j < i; ++j) commands_by_id_[ids[j]].state.store(kFree);
      return ResourceExhaustedError("NVMe-KV queue " + std::to_string(qid_) + ": all " +
                                    std::to_string(entries_) + " command ids are in flight");
    }
    ids[i] = *id;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    SubmissionEntry placed = entries[i];
    placed.set_command_id(ids[i]);
    Status s = Place(placed, deadline);
    if (!s.ok()) {
      for (size_t j = i; j < entries.size(); ++j) commands_by_id_[ids[j]].state.store(kFree);
      for (size_t j = 0; j < i; ++j) Abandon(ids[j]);
      return s;
    }
  }
  Publish();
  return Status::Ok();
}

std::optional<CompletionEntry> QueuePair::Poll(uint16_t cid) {
  if (cid >= entries_) return std::nullopt;
  CommandSlot& s = commands_by_id_[cid];
  if (s.state.load(std::memory_order_acquire) != kDone) {
    TryDrain();
    if (s.state.load(std::memory_order_acquire) != kDone) return std::nullopt;
  }
  CompletionEntry c = s.Take();
  s.state.store(kFree, std::memory_order_release);
  return c;
}

DataBuffer& DataBuffer::operator=(DataBuffer&& o) noexcept {
  if (this != &o) {
    if (owner_ != nullptr) owner_->Free(offset_, bytes_.size());
    owner_ = std::exchange(o.owner_, nullptr);
    offset_ = o.offset_;
    bytes_ = o.bytes_;
  }
  return *this;
}

DataBuffer::~DataBuffer() {
  if (owner_ != nullptr) owner_->Free(offset_, bytes_.size());
}

DataAllocator::DataAllocator(std::span<std::byte> region) : region_(region) {
  free_[0] = region.size() / kPageBytes * kPageBytes;
}

Result<DataBuffer> DataAllocator::Allocate(size_t bytes) {
  size_t want = RoundUpToPage(std::max<size_t>(bytes, 1));
  std::lock_guard l(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    uint64_t at = it->first, left = it->second - want;
    free_.erase(it);
    if (left > 0) free_[at + want] = left;
    return DataBuffer(this, at, region_.subspan(at, bytes));
  }
  return ResourceExhaustedError("the NVMe-KV data region (" + std::to_string(region_.size()) +
                                " bytes) has no free " + std::to_string(want) + " bytes");
}

void DataAllocator::Free(uint64_t offset, size_t bytes) {
  uint64_t len = RoundUpToPage(std::max<size_t>(bytes, 1));
  std::lock_guard l(mu_);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += len;
      return;
    }
  }
  free_[offset] = len;
}

Result<std::unique_ptr<Host>> Host::Attach(const HostOptions& options) {
  if (options.io_queues < 1 || options.io_queues >= kMaxQueues) {
    return InvalidArgumentError("NVMe-KV host: I/O queues must be 1.." +
                                std::to_string(kMaxQueues - 1));
  }
  OC_ASSIGN_OR_RETURN(SharedMemory mem, SharedMemory::Open(options.shm_name));
  if (flock(mem.fd(), LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError("NVMe-KV controller " + mem.name() +
                                   " is attached to another host");
  }
  std::unique_ptr<Host> host(new Host(std::move(mem)));
  OC_RETURN_IF_ERROR(host->Start(options));
  return host;
}

Status Host::Start(const HostOptions& options) {
  const std::string& name = mem_.name();
  uint64_t cap = mem_.Register64(reg::kCap).load(std::memory_order_acquire);
  max_queue_entries_ = static_cast<uint32_t>(cap & 0xffff) + 1;
  if (((cap >> reg::kCapDstrdShift) & 0xf) != kDoorbellStride || !(cap & reg::kCapIoCommandSets)) {
    return FailedPreconditionError("NVMe-KV controller " + name +
                                   ": unexpected doorbell stride or no I/O command sets");
  }
  auto ready_timeout = std::chrono::milliseconds(500 * ((cap >> reg::kCapTimeoutShift) & 0xff));
  auto csts = [&] { return mem_.Register32(reg::kCsts).load(std::memory_order_acquire); };
  // A host that went away may have left it enabled: reset first.
  mem_.Register32(reg::kCc).store(0, std::memory_order_release);
  if (!WaitUntil(Clock::now() + ready_timeout, [&] { return (csts() & reg::kCstsReady) == 0; })) {
    return FailedPreconditionError("NVMe-KV controller " + name +
                                   " did not reset (CSTS.RDY stays 1)");
  }
  uint32_t entries = std::min(options.queue_entries, max_queue_entries_);
  uint32_t admin_entries = std::min<uint32_t>(64, max_queue_entries_);
  if (entries < 2) return InvalidArgumentError("NVMe-KV host: queues need 2 entries or more");
  // Queue memory: the admin pair, then each I/O pair, each queue page aligned.
  size_t needed = QueuePairBytes(admin_entries) + options.io_queues * QueuePairBytes(entries);
  std::span<std::byte> qmem = mem_.queue_memory();
  if (needed > qmem.size()) {
    return InvalidArgumentError(
        "NVMe-KV controller " + name + " has queue memory for " + std::to_string(qmem.size()) +
        " bytes; " + std::to_string(options.io_queues) + " queues of " + std::to_string(entries) +
        " entries need " + std::to_string(needed));
  }
  std::memset(qmem.data(), 0, needed);  // phase tags start at 0
  uint64_t admin_cq = RoundUpToPage(admin_entries * kSubmissionEntryBytes);
  mem_.Register32(reg::kAqa).store((admin_entries - 1) | ((admin_entries - 1) << 16));
  mem_.Register64(reg::kAsq).store(0);
  mem_.Register64(reg::kAcq).store(admin_cq);
  uint32_t cc = reg::kCcEnable | (6u << reg::kCcCssShift) | (6u << reg::kCcIosqesShift) |
                (4u << reg::kCcIocqesShift);
  mem_.Register32(reg::kCc).store(cc, std::memory_order_release);
  if (!WaitUntil(Clock::now() + ready_timeout,
                 [&] { return (csts() & (reg::kCstsReady | reg::kCstsFatal)) != 0; })) {
    return FailedPreconditionError("NVMe-KV controller " + name + " did not become ready");
  }
  if (csts() & reg::kCstsFatal) {
    return FailedPreconditionError("NVMe-KV controller " + name + " refused the admin queues");
  }
  allocator_ = std::make_unique<DataAllocator>(mem_.data_region());
  admin_ = std::make_unique<QueuePair>(mem_, 0, admin_entries, 0, admin_cq, options.timeout);

  OC_ASSIGN_OR_RETURN(DataBuffer id_buf, Allocate(kIdentifyBytes));
  OC_ASSIGN_OR_RETURN(CompletionEntry c,
                      Admin(IdentifyCommand(admin::kCnsController, 0, 0, id_buf.offset())));
  OC_RETURN_IF_ERROR(CompletionStatusToStatus(c, "Identify Controller"));
  identity_ = DecodeControllerIdentity(std::span<const uint8_t, kIdentifyBytes>(
      reinterpret_cast<const uint8_t*>(id_buf.bytes().data()), kIdentifyBytes));

  uint32_t want = options.io_queues - 1u;
  OC_ASSIGN_OR_RETURN(
      c, Admin(SetFeaturesCommand(admin::kFeatureNumberOfQueues, want | (want << 16))));
  OC_RETURN_IF_ERROR(CompletionStatusToStatus(c, "Set Features (Number of Queues)"));
  uint32_t granted = std::min(c.dw[0] & 0xffff, c.dw[0] >> 16) + 1;
  if (granted < options.io_queues) {
    return FailedPreconditionError("NVMe-KV controller " + name + " grants " +
                                   std::to_string(granted) + " I/O queues; asked for " +
                                   std::to_string(options.io_queues));
  }
  uint64_t at = QueuePairBytes(admin_entries);
  for (uint16_t qid = 1; qid <= options.io_queues; ++qid) {
    uint64_t sq = at, cq = at + RoundUpToPage(entries * kSubmissionEntryBytes);
    OC_ASSIGN_OR_RETURN(c, Admin(CreateIoCqCommand(qid, static_cast<uint16_t>(entries), cq)));
    OC_RETURN_IF_ERROR(
        CompletionStatusToStatus(c, "Create I/O Completion Queue " + std::to_string(qid)));
    OC_ASSIGN_OR_RETURN(c, Admin(CreateIoSqCommand(qid, static_cast<uint16_t>(entries), sq, qid)));
    OC_RETURN_IF_ERROR(
        CompletionStatusToStatus(c, "Create I/O Submission Queue " + std::to_string(qid)));
    io_.push_back(std::make_unique<QueuePair>(mem_, qid, entries, sq, cq, options.timeout));
    at += QueuePairBytes(entries);
  }
  return Status::Ok();
}

Host::~Host() {
  if (admin_ != nullptr) {
    // Stop at the first command that gets no answer: the controller is gone.
    for (auto& q : io_) {
      if (!Admin(DeleteIoSqCommand(q->id())).ok() || !Admin(DeleteIoCqCommand(q->id())).ok()) break;
    }
    uint32_t cc = mem_.Register32(reg::kCc).load();
    mem_.Register32(reg::kCc).store(cc | (1u << reg::kCcShnShift), std::memory_order_release);
    auto deadline = Clock::now() + std::chrono::seconds(1);
    WaitUntil(deadline, [&] {
      return (mem_.Register32(reg::kCsts).load(std::memory_order_acquire) &
              reg::kCstsShutdownMask) == reg::kCstsShutdownComplete;
    });
  }
  mem_.Register32(reg::kCc).store(0, std::memory_order_release);
  io_.clear();
  admin_.reset();
  allocator_.reset();
}

Result<CompletionEntry> Host::Admin(SubmissionEntry entry) { return admin_->Execute(entry); }

Result<KeyValueNamespace> Host::IdentifyNamespace() {
  OC_ASSIGN_OR_RETURN(DataBuffer buf, Allocate(kIdentifyBytes));
  OC_ASSIGN_OR_RETURN(CompletionEntry c,
                      Admin(IdentifyCommand(admin::kCnsCommandSetNamespace, kNamespaceId,
                                            kCommandSetKeyValue, buf.offset())));
  OC_RETURN_IF_ERROR(CompletionStatusToStatus(c, "Identify Namespace (key value)"));
  auto ns = DecodeKeyValueNamespace(std::span<const uint8_t, kIdentifyBytes>(
      reinterpret_cast<const uint8_t*>(buf.bytes().data()), kIdentifyBytes));
  if (!ns) return FailedPreconditionError("the namespace reports no key-value format");
  return *ns;
}

Status CompletionStatusToStatus(const CompletionEntry& c, std::string_view what) {
  CompletionStatus s = c.status();
  if (s.ok()) return Status::Ok();
  std::string message = std::string(what) + ": " + DescribeStatus(s);
  if (IsKeyValueStatus(s, sc::kKeyDoesNotExist)) return NotFoundError(message);
  if (IsKeyValueStatus(s, sc::kKeyExists)) return AlreadyExistsError(message);
  if (IsKeyValueStatus(s, sc::kCapacityExceeded)) return ResourceExhaustedError(message);
  if (IsKeyValueStatus(s, sc::kUnrecoveredError)) return DataLossError(message);
  if (IsKeyValueStatus(s, sc::kInvalidValueSize) || IsKeyValueStatus(s, sc::kInvalidKeySize) ||
      (s.type == 0 && s.code == sc::kInvalidField)) {
    return InvalidArgumentError(message);
  }
  return InternalError(message);
}

namespace {
Result<CompletionEntry> RunKv(QueuePair& q, const SubmissionEntry& e, const Key& key) {
  OC_ASSIGN_OR_RETURN(CompletionEntry c, q.Execute(e));
  OC_RETURN_IF_ERROR(
      CompletionStatusToStatus(c, std::string(OpcodeName(e.opcode())) + " of key " + key.ToHex()));
  return c;
}
}  // namespace

Status KvStore(QueuePair& q, const Key& key, const DataBuffer& value, uint32_t size,
               uint8_t options) {
  return RunKv(q, StoreCommand(key, value.offset(), size, options), key).status();
}

Result<uint32_t> KvRetrieve(QueuePair& q, const Key& key, const DataBuffer& buffer,
                            uint32_t buffer_size) {
  OC_ASSIGN_OR_RETURN(CompletionEntry c,
                      RunKv(q, RetrieveCommand(key, buffer.offset(), buffer_size), key));
  return c.dw[0];
}

Result<uint32_t> KvRetrieveRange(QueuePair& q, const Key& key, const DataBuffer& buffer,
                                 uint32_t length, uint64_t offset) {
  OC_ASSIGN_OR_RETURN(CompletionEntry c,
                      RunKv(q, RetrieveRangeCommand(key, buffer.offset(), length, offset), key));
  return c.dw[0];
}

Result<bool> KvExist(QueuePair& q, const Key& key) {
  Result<CompletionEntry> c = RunKv(q, ExistCommand(key), key);
  if (c.ok()) return true;
  if (c.status().code() == StatusCode::kNotFound) return false;
  return c.status();
}

Status KvDelete(QueuePair& q, const Key& key) { return RunKv(q, DeleteCommand(key), key).status(); }

Result<std::vector<Key>> KvList(QueuePair& q, const Key& start, const DataBuffer& buffer,
                                uint32_t buffer_size) {
  OC_RETURN_IF_ERROR(RunKv(q, ListCommand(start, buffer.offset(), buffer_size), start).status());
  auto keys = DecodeKeyList(std::span(reinterpret_cast<const uint8_t*>(buffer.bytes().data()),
                                      std::min<size_t>(buffer_size, buffer.bytes().size())));
  if (!keys) return DataLossError("List from key " + start.ToHex() + ": malformed key list");
  return *keys;
}

}  // namespace objectcache::nvmekv
