#include "nvmekv/controller.h"

#include <sys/prctl.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "nvmekv/spec.h"

namespace objectcache::nvmekv {
namespace {

using Clock = std::chrono::steady_clock;

// The store's answer as a completion status.
CompletionStatus FromStore(const Status& s) {
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
Outcome Fail(CompletionStatus s) { return {s, 0, 0}; }

struct CompletionQueue {
  uint16_t qid = 0;
  uint32_t entries = 0;
  CompletionEntry* base = nullptr;
  std::mutex mu;
  uint32_t tail = 0;  // guarded by mu
  bool phase = true;  // guarded by mu
  int sq_refs = 0;    // submission queues posting here (leader only)
};

struct SubmissionQueue {
  uint16_t qid = 0;
  uint32_t entries = 0;
  SubmissionEntry* base = nullptr;
  std::shared_ptr<CompletionQueue> cq;
  std::atomic<uint32_t> head{0};  // written by the leader only
  std::atomic<int> in_flight{0};
  uint32_t last_bad_tail = UINT32_MAX;  // leader only: count a bad doorbell value once
};

struct Command {
  SubmissionEntry entry;
  std::shared_ptr<SubmissionQueue> sq;
};

}  // namespace

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
  void WorkerLoop() {
    prctl(PR_SET_TIMERSLACK, 1000UL);  // sleeps of microseconds, not the default 50 us slack
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !leader_taken_; });
      if (stopping_) return;
      leader_taken_ = true;
      lock.unlock();
      std::optional<Command> cmd = Lead();
      lock.lock();
      leader_taken_ = false;
      cv_.notify_one();
      if (!cmd) continue;
      lock.unlock();
      Outcome o = RunIo(cmd->entry);
      Post(*cmd->sq, cmd->entry.command_id(), o);
      cmd->sq->in_flight.fetch_sub(1);
      in_flight_.fetch_sub(1);
      lock.lock();
    }
  }

  std::optional<Command> Lead() {
    for (;;) {
      if (stopping_) return std::nullopt;
      if (std::optional<Command> c = PollOnce()) return c;
      if (Clock::now() - last_work_ < opt_.busy_poll) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(sleep_);
      RepairSegment();  // one fstat when idle
      // Within 10 ms of the last command the next one is likely soon (a store call's time
      // away): sleeps stay short. Past that, back off to the configured longest.
      const bool active = Clock::now() - last_work_ < std::chrono::milliseconds(10);
      sleep_ = std::min({sleep_ * 2, opt_.max_poll_interval,
                         active ? std::chrono::microseconds(50) : opt_.max_poll_interval});
    }
  }

  void SawWork() {
    last_work_ = Clock::now();
    sleep_ = std::max(opt_.poll_interval, std::chrono::microseconds(1));
  }

  // The registers that say what the controller is (CAP, VS).
  void WriteIdentity() {
    uint64_t cap = uint64_t{opt_.max_queue_entries - 1} | reg::kCapContiguousQueues |
                   (uint64_t{10} << reg::kCapTimeoutShift) |
                   (uint64_t{kDoorbellStride} << reg::kCapDstrdShift) | reg::kCapIoCommandSets;
    mem_.Register64(reg::kCap).store(cap);
    mem_.Register32(reg::kVs).store(0x00020000);  // 2.0: I/O command sets
  }

  // A host that resized the segment (an access past a cut was caught, SharedMemory::resizes)
  // or wrote over its descriptor: the segment gets both back, and the identity registers, so
  // the next host can attach; an attached host gets the fatal status. Leader only.
  void RepairSegment() {
    const uint64_t resizes = mem_.resizes();
    const bool caught = resizes != seen_resizes_;
    seen_resizes_ = resizes;
    if (!mem_.Restore() && !caught) return;
    counters_.segment_repairs.fetch_add(1);
    WriteIdentity();
    if (enabled_) FailHost();
  }

  // Leader only.
  std::optional<Command> PollOnce() {
    if (mem_.resizes() != seen_resizes_) RepairSegment();
    uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
    bool enable = cc & reg::kCcEnable;
    if (host_failed_ && enabled_) {  // a host that broke its queues gets nothing more done
      enabled_ = false;
      fatal_ = true;
      MarkFatal();  // again on the leader, which alone writes CSTS otherwise
    }
    if (enable && !enabled_ && !fatal_) {
      Enable(cc);
    } else if (!enable && (enabled_ || fatal_)) {
      Reset();
    }
    if (!enabled_) return std::nullopt;
    if (((cc >> reg::kCcShnShift) & 3) != 0 && !shut_down_) {
      WaitIdle();
      shut_down_ = true;
      mem_.Register32(reg::kCsts)
          .store(reg::kCstsReady | reg::kCstsShutdownComplete, std::memory_order_release);
    }
    while (std::optional<SubmissionEntry> e = Fetch(*sqs_[0])) {
      SawWork();
      counters_.admin_commands.fetch_add(1);
      Outcome o = RunAdmin(*e);
      Post(*sqs_[0], e->command_id(), o);
    }
    size_t n = active_.size();
    for (size_t i = 0; i < n; ++i) {
      const std::shared_ptr<SubmissionQueue>& sq = sqs_[active_[(next_ + i) % n]];
      if (std::optional<SubmissionEntry> e = Fetch(*sq)) {
        next_ = (next_ + i + 1) % n;
        SawWork();
        sq->in_flight.fetch_add(1);
        in_flight_.fetch_add(1);
        counters_.io_commands.fetch_add(1);
        return Command{*e, sq};
      }
    }
    return std::nullopt;
  }

  std::optional<SubmissionEntry> Fetch(SubmissionQueue& sq) {
    uint32_t tail =
        mem_.Register32(SqTailDoorbell(sq.qid, kDoorbellStride)).load(std::memory_order_acquire);
    if (tail >= sq.entries) {  // the host broke its queue: the fatal status until it resets
      if (tail != sq.last_bad_tail) counters_.bad_doorbells.fetch_add(1);
      sq.last_bad_tail = tail;
      FailHost();
      return std::nullopt;
    }
    uint32_t head = sq.head.load(std::memory_order_relaxed);
    if (head == tail) return std::nullopt;
    SubmissionEntry e;
    std::memcpy(&e, sq.base + head, sizeof e);
    sq.head.store((head + 1) % sq.entries, std::memory_order_relaxed);
    return e;
  }

  // Posts a completion for command `cid` of `sq`, waiting while its completion queue is full:
  // at most opt_.completion_timeout, and never past a stop, a reset or the host's disable
  // (CC.EN = 0). A host that does not drain its queue in that time, or whose head doorbell is
  // outside the queue, gets the controller's fatal status; the completion is dropped. Nothing a
  // host writes can hold a worker, or the leader on the admin queue, for longer.
  void Post(SubmissionQueue& sq, uint16_t cid, const Outcome& o) {
    if (!o.status.ok()) counters_.errors.fetch_add(1);
    CompletionQueue& cq = *sq.cq;
    std::unique_lock l(cq.mu);
    const auto deadline = Clock::now() + opt_.completion_timeout;
    for (;;) {
      uint32_t head =
          mem_.Register32(CqHeadDoorbell(cq.qid, kDoorbellStride)).load(std::memory_order_acquire);
      if (head >= cq.entries) {
        counters_.bad_doorbells.fetch_add(1);
        return FailHost();
      }
      if ((cq.tail + 1) % cq.entries != head) break;
      const uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
      if (stopping_ || resetting_ || host_failed_ || !(cc & reg::kCcEnable)) return;
      if (Clock::now() >= deadline) return FailHost();
      l.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      l.lock();
    }
    CompletionEntry* slot = cq.base + cq.tail;
    slot->dw[0] = o.dw0;
    slot->dw[1] = o.dw1;
    // The SQ head read under the CQ's lock, so heads never go back along one completion queue.
    slot->dw[2] = sq.head.load(std::memory_order_relaxed) | (uint32_t{sq.qid} << 16);
    mem_.Word32(&slot->dw[3])
        .store(CompletionDw3(cid, cq.phase, o.status), std::memory_order_release);
    if (++cq.tail == cq.entries) {
      cq.tail = 0;
      cq.phase = !cq.phase;
    }
  }

  // Queue memory of `entries` entries of `entry_bytes` at `base`: page aligned and inside.
  std::optional<std::byte*> QueueMemory(uint64_t base, uint32_t entries, size_t entry_bytes) {
    if (base % kPageBytes != 0 ||
        !RangeWithin(base, uint64_t{entries} * entry_bytes, mem_.queue_memory().size())) {
      return std::nullopt;
    }
    return mem_.queue_memory().data() + base;
  }

  std::optional<std::span<std::byte>> Data(uint64_t offset, uint64_t length) {
    std::span<std::byte> d = mem_.data_region();
    if (!RangeWithin(offset, length, d.size())) return std::nullopt;
    return d.subspan(offset, length);
  }

  void Enable(uint32_t cc) {
    uint32_t aqa = mem_.Register32(reg::kAqa).load(std::memory_order_acquire);
    uint32_t sq_entries = (aqa & 0xfff) + 1, cq_entries = ((aqa >> 16) & 0xfff) + 1;
    uint64_t asq = mem_.Register64(reg::kAsq).load(std::memory_order_acquire);
    uint64_t acq = mem_.Register64(reg::kAcq).load(std::memory_order_acquire);
    uint32_t css = (cc >> reg::kCcCssShift) & 7, mps = (cc >> 7) & 0xf;
    auto sq_mem = QueueMemory(asq, sq_entries, kSubmissionEntryBytes);
    auto cq_mem = QueueMemory(acq, cq_entries, kCompletionEntryBytes);
    bool valid = sq_entries >= 2 && cq_entries >= 2 && sq_entries <= opt_.max_queue_entries &&
                 cq_entries <= opt_.max_queue_entries && (css == 0 || css == 6) && mps == 0 &&
                 sq_mem && cq_mem;
    if (!valid) {
      fatal_ = true;
      mem_.Register32(reg::kCsts).store(reg::kCstsFatal, std::memory_order_release);
      return;
    }
    auto cq = std::make_shared<CompletionQueue>();
    cq->qid = 0;
    cq->entries = cq_entries;
    cq->base = reinterpret_cast<CompletionEntry*>(*cq_mem);
    cq->sq_refs = 1;
    auto sq = std::make_shared<SubmissionQueue>();
    sq->qid = 0;
    sq->entries = sq_entries;
    sq->base = reinterpret_cast<SubmissionEntry*>(*sq_mem);
    sq->cq = cq;
    mem_.Register32(SqTailDoorbell(0, kDoorbellStride)).store(0);
    mem_.Register32(CqHeadDoorbell(0, kDoorbellStride)).store(0);
    cqs_[0] = cq;
    sqs_[0] = sq;
    enabled_ = true;
    counters_.enables.fetch_add(1);
    mem_.Register32(reg::kCsts).store(reg::kCstsReady, std::memory_order_release);
  }

  void WaitIdle() {
    while (in_flight_.load() != 0 && !stopping_)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }

  // CC.EN 1 -> 0: every queue goes; in-flight commands finish first (their completions are
  // dropped if they would have to wait for room).
  // The host broke its side of a queue: the controller's fatal status (CSTS.CFS) until the host
  // resets it; no command is fetched meanwhile.
  void FailHost() {
    if (host_failed_.exchange(true)) return;
    counters_.host_failures.fetch_add(1);
    MarkFatal();
  }
  void MarkFatal() {
    SharedWord<uint32_t> csts = mem_.Register32(reg::kCsts);
    csts.store(csts.load(std::memory_order_acquire) | reg::kCstsFatal, std::memory_order_release);
  }

  void Reset() {
    resetting_ = true;
    WaitIdle();
    for (auto& q : sqs_) q.reset();
    for (auto& q : cqs_) q.reset();
    active_.clear();
    next_ = 0;
    enabled_ = fatal_ = shut_down_ = false;
    host_failed_ = false;
    granted_io_queues_ = opt_.max_io_queues;
    queues_created_ = false;
    delete_missing_fails_ = false;
    resetting_ = false;
    mem_.Register32(reg::kCsts).store(0, std::memory_order_release);
  }

  Outcome RunAdmin(const SubmissionEntry& e) {
    switch (e.opcode()) {
      case admin::kIdentify:
        return Identify(e);
      case admin::kSetFeatures:
        return SetFeatures(e);
      case admin::kGetFeatures:
        return GetFeatures(e);
      case admin::kCreateIoCq:
        return CreateCq(e);
      case admin::kCreateIoSq:
        return CreateSq(e);
      case admin::kDeleteIoSq:
        return DeleteSq(e);
      case admin::kDeleteIoCq:
        return DeleteCq(e);
      default:
        return Fail(Generic(sc::kInvalidOpcode));
    }
  }

  Outcome Identify(const SubmissionEntry& e) {
    auto buf = Data(e.data_pointer(), kIdentifyBytes);
    if (!buf) return Fail(Generic(sc::kDataTransferError));
    uint8_t cns = e.dw[10] & 0xff, csi = static_cast<uint8_t>(e.dw[11] >> 24);
    std::array<uint8_t, kIdentifyBytes> out{};
    switch (cns) {
      case admin::kCnsController: {
        ControllerIdentity id;
        id.serial = "OC" + std::to_string(getpid());
        id.model = "ObjectCache NVMe-KV over " + store_->Uri().substr(0, 14);
        id.firmware = "0.1.0";
        uint32_t pages = opt_.max_value_bytes / kPageBytes;
        while ((uint32_t{1} << id.mdts) < pages) ++id.mdts;
        id.version = 0x00020000;
        id.maxcmd = static_cast<uint16_t>(std::min<uint32_t>(opt_.max_queue_entries, 0xffff));
        id.namespaces = 1;
        EncodeControllerIdentity(id, out);
        break;
      }
      case admin::kCnsNamespace:  // not an NVM namespace: zeros, as the spec asks
        if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
        break;
      case admin::kCnsActiveNamespaces:
        if (e.nsid() < kNamespaceId) out[0] = kNamespaceId;
        break;
      case admin::kCnsCommandSetNamespace: {
        if (csi != kCommandSetKeyValue) return Fail(Generic(sc::kInvalidField));
        if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
        KeyValueNamespace ns;
        ns.size_bytes = store_->Capabilities().capacity_bytes.value_or(0);
        ns.used_bytes = store_->Usage().bytes;
        ns.max_value_length = opt_.max_value_bytes;
        ns.max_keys = 0xffffffff;
        EncodeKeyValueNamespace(ns, out);
        break;
      }
      default:
        return Fail(Generic(sc::kInvalidField));
    }
    std::memcpy(buf->data(), out.data(), out.size());
    return {};
  }

  Outcome SetFeatures(const SubmissionEntry& e) {
    switch (e.dw[10] & 0xff) {
      case admin::kFeatureNumberOfQueues: {
        uint32_t nsqr = e.dw[11] & 0xffff, ncqr = e.dw[11] >> 16;
        if (nsqr == 0xffff || ncqr == 0xffff) return Fail(Generic(sc::kInvalidField));
        if (queues_created_) return Fail(Generic(0x0C));  // Command Sequence Error
        granted_io_queues_ =
            static_cast<uint16_t>(std::min<uint32_t>(std::max(nsqr, ncqr) + 1, opt_.max_io_queues));
        return GetFeatures(e);
      }
      case admin::kFeatureKeyValueConfig:
        delete_missing_fails_ = e.dw[11] & 1;
        return {};
      default:
        return Fail(Generic(sc::kInvalidField));
    }
  }

  Outcome GetFeatures(const SubmissionEntry& e) {
    switch (e.dw[10] & 0xff) {
      case admin::kFeatureNumberOfQueues: {
        uint32_t n = granted_io_queues_ - 1u;
        return {Generic(sc::kSuccess), (n << 16) | n, 0};
      }
      case admin::kFeatureKeyValueConfig:
        return {Generic(sc::kSuccess), delete_missing_fails_ ? 1u : 0u, 0};
      default:
        return Fail(Generic(sc::kInvalidField));
    }
  }

  bool ValidIoQueueId(uint16_t qid) const { return qid >= 1 && qid <= granted_io_queues_; }

  Outcome CreateCq(const SubmissionEntry& e) {
    uint16_t qid = e.dw[10] & 0xffff;
    uint32_t entries = (e.dw[10] >> 16) + 1;
    uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
    if (((cc >> reg::kCcIocqesShift) & 0xf) != 4) return Fail(Generic(sc::kInvalidField));
    if (!ValidIoQueueId(qid) || cqs_[qid])
      return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
    if (entries < 2 || entries > opt_.max_queue_entries) {
      return Fail(CommandSpecific(sc::kInvalidQueueSize));
    }
    auto base = QueueMemory(e.data_pointer(), entries, kCompletionEntryBytes);
    if ((e.dw[11] & 1) == 0 || !base) return Fail(Generic(sc::kInvalidField));
    auto cq = std::make_shared<CompletionQueue>();
    cq->qid = qid;
    cq->entries = entries;
    cq->base = reinterpret_cast<CompletionEntry*>(*base);
    mem_.Register32(CqHeadDoorbell(qid, kDoorbellStride)).store(0);
    cqs_[qid] = cq;
    queues_created_ = true;
    return {};
  }

  Outcome CreateSq(const SubmissionEntry& e) {
    uint16_t qid = e.dw[10] & 0xffff, cqid = static_cast<uint16_t>(e.dw[11] >> 16);
    uint32_t entries = (e.dw[10] >> 16) + 1;
    uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
    if (((cc >> reg::kCcIosqesShift) & 0xf) != 6) return Fail(Generic(sc::kInvalidField));
    if (!ValidIoQueueId(qid) || sqs_[qid])
      return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
    if (cqid == 0 || cqid >= kMaxQueues || !cqs_[cqid]) {
      return Fail(CommandSpecific(sc::kCompletionQueueInvalid));
    }
    if (entries < 2 || entries > opt_.max_queue_entries) {
      return Fail(CommandSpecific(sc::kInvalidQueueSize));
    }
    auto base = QueueMemory(e.data_pointer(), entries, kSubmissionEntryBytes);
    if ((e.dw[11] & 1) == 0 || !base) return Fail(Generic(sc::kInvalidField));
    auto sq = std::make_shared<SubmissionQueue>();
    sq->qid = qid;
    sq->entries = entries;
    sq->base = reinterpret_cast<SubmissionEntry*>(*base);
    sq->cq = cqs_[cqid];
    sq->cq->sq_refs++;
    mem_.Register32(SqTailDoorbell(qid, kDoorbellStride)).store(0);
    sqs_[qid] = sq;
    active_.push_back(qid);
    queues_created_ = true;
    return {};
  }

  // Commands already fetched from the queue finish (and post) before the deletion completes.
  Outcome DeleteSq(const SubmissionEntry& e) {
    uint16_t qid = e.dw[10] & 0xffff;
    if (qid == 0 || qid >= kMaxQueues || !sqs_[qid]) {
      return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
    }
    std::shared_ptr<SubmissionQueue> sq = std::move(sqs_[qid]);
    std::erase(active_, qid);
    next_ = 0;
    while (sq->in_flight.load() != 0 && !stopping_) std::this_thread::yield();
    sq->cq->sq_refs--;
    return {};
  }

  Outcome DeleteCq(const SubmissionEntry& e) {
    uint16_t qid = e.dw[10] & 0xffff;
    if (qid == 0 || qid >= kMaxQueues || !cqs_[qid]) {
      return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
    }
    if (cqs_[qid]->sq_refs > 0) return Fail(CommandSpecific(sc::kInvalidQueueDeletion));
    cqs_[qid].reset();
    return {};
  }

  Outcome RunIo(const SubmissionEntry& e) {
    uint8_t op = e.opcode();
    if (op != kv::kStore && op != kv::kRetrieve && op != kv::kRetrieveRange && op != kv::kList &&
        op != kv::kDelete && op != kv::kExist) {
      return Fail(Generic(sc::kInvalidOpcode));
    }
    if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
    uint8_t kl = KeyLength(e);
    if (kl == 0 || kl > kMaxKeyLength) return Fail(Generic(sc::kInvalidKeySize));
    Key key = KeyOf(e);
    std::string name = opt_.name_prefix + key.ToHex();
    switch (op) {
      case kv::kStore:
        return StoreValue(e, name);
      case kv::kRetrieve:
        return Retrieve(e, name);
      case kv::kRetrieveRange:
        return RetrieveRange(e, name);
      case kv::kList:
        return List(e, key);
      case kv::kDelete: {
        Status s = store_->Delete(name);
        if (s.code() == StatusCode::kNotFound && !delete_missing_fails_) return {};
        return Fail(FromStore(s));
      }
      default: {  // Exist
        const std::string_view view = name;
        auto r = store_->Exist(std::span(&view, 1));
        if (!r.ok()) return Fail(FromStore(r.status()));
        return (*r)[0] ? Outcome{} : Fail(Generic(sc::kKeyDoesNotExist));
      }
    }
  }

  Outcome StoreValue(const SubmissionEntry& e, const std::string& name) {
    uint32_t size = e.dw[10];
    uint8_t options = static_cast<uint8_t>(e.dw[11] >> 8);
    if (size > opt_.max_value_bytes) return Fail(Generic(sc::kInvalidValueSize));
    bool update_only = options & kv::kStoreUpdateOnly, create_only = options & kv::kStoreCreateOnly;
    if (update_only && create_only) return Fail(Generic(sc::kInvalidField));
    auto value = Data(e.data_pointer(), size);
    if (!value) return Fail(Generic(sc::kDataTransferError));
    PutOptions put;
    if (update_only || (create_only && !store_->Capabilities().conditional_put)) {
      // Not atomic against a concurrent Delete or Store of the same key; the command set
      // orders no two commands on one key.
      auto st = store_->Stat(name);
      if (!st.ok() && st.status().code() != StatusCode::kNotFound)
        return Fail(FromStore(st.status()));
      if (update_only && !st.ok()) return Fail(Generic(sc::kKeyDoesNotExist));
      if (create_only && st.ok()) return Fail(Generic(sc::kKeyExists));
    } else if (create_only) {
      put.if_absent = true;
    }
    return Fail(FromStore(store_->Put(name, *value, put)));
  }

  Outcome Retrieve(const SubmissionEntry& e, const std::string& name) {
    auto dest = Data(e.data_pointer(), e.dw[10]);
    if (!dest) return Fail(Generic(sc::kDataTransferError));
    uint64_t size = 0;
    Result<size_t> whole = dest->empty() ? Result<size_t>(ResourceExhaustedError("no buffer"))
                                         : store_->Retrieve(name, *dest);
    if (whole.ok()) {
      size = *whole;
    } else if (whole.status().code() == StatusCode::kResourceExhausted) {
      // The value is larger than the buffer: its first bytes, and its size in DW0.
      auto reader = store_->OpenReader(name);
      if (!reader.ok()) return Fail(FromStore(reader.status()));
      size = (*reader)->size();
      size_t n = static_cast<size_t>(std::min<uint64_t>(size, dest->size()));
      Status s = (*reader)->ReadAt(0, dest->first(n));
      if (!s.ok()) return Fail(FromStore(s));
    } else {
      return Fail(FromStore(whole.status()));
    }
    if (size > UINT32_MAX) return Fail(Generic(sc::kInvalidValueSize));
    return {Generic(sc::kSuccess), static_cast<uint32_t>(size), 0};
  }

  Outcome RetrieveRange(const SubmissionEntry& e, const std::string& name) {
    auto dest = Data(e.data_pointer(), e.dw[10]);
    if (!dest) return Fail(Generic(sc::kDataTransferError));
    uint64_t offset = e.dw[12] | (uint64_t{e.dw[13]} << 32);
    RangeRead read{name, offset, *dest, {}};
    Status s = store_->RetrieveRanges(std::span<RangeRead>(&read, 1));
    if (!s.ok()) return Fail(FromStore(s));
    if (read.status.ok()) return {Generic(sc::kSuccess), e.dw[10], 0};
    if (read.status.code() != StatusCode::kOutOfRange) return Fail(FromStore(read.status));
    // The value ends inside the range: the bytes up to its end.
    auto reader = store_->OpenReader(name);
    if (!reader.ok()) return Fail(FromStore(reader.status()));
    uint64_t size = (*reader)->size();
    if (offset > size) return Fail(Generic(sc::kInvalidField));
    size_t n = static_cast<size_t>(std::min<uint64_t>(size - offset, dest->size()));
    s = (*reader)->ReadAt(offset, dest->first(n));
    if (!s.ok()) return Fail(FromStore(s));
    return {Generic(sc::kSuccess), static_cast<uint32_t>(n), 0};
  }

  // Keys from `start` (inclusive) in byte order, as many whole ones as the buffer holds.
  Outcome List(const SubmissionEntry& e, const Key& start) {
    auto dest = Data(e.data_pointer(), e.dw[10]);
    if (!dest) return Fail(Generic(sc::kDataTransferError));
    if (dest->size() < 4) return Fail(Generic(sc::kInvalidField));
    const std::string& prefix = opt_.name_prefix;
    std::string first = prefix + start.ToHex();
    std::vector<Key> keys;
    size_t bytes = 4;
    auto add = [&](const Key& k) {
      size_t need = (2 + size_t{k.length} + 3) / 4 * 4;
      if (dest->size() - bytes < need) return false;
      bytes += need;
      keys.push_back(k);
      return true;
    };
    auto st = store_->Stat(first);
    if (!st.ok() && st.status().code() != StatusCode::kNotFound)
      return Fail(FromStore(st.status()));
    bool room = !st.ok() || add(start);
    ListOptions lo;
    lo.prefix = prefix;
    lo.start_after = first;
    while (room) {
      lo.max_keys = std::min<size_t>(1000, (dest->size() - bytes) / 4 + 1);
      auto page = store_->List(lo);
      if (!page.ok()) return Fail(FromStore(page.status()));
      for (const ObjectInfo& o : page->objects) {
        std::optional<Key> k = Key::FromHex(std::string_view(o.key).substr(prefix.size()));
        if (k && !(room = add(*k))) break;
      }
      if (!page->truncated || page->objects.empty()) break;
      lo.start_after = page->objects.back().key;
    }
    size_t n =
        EncodeKeyList(keys, std::span(reinterpret_cast<uint8_t*>(dest->data()), dest->size()));
    return {Generic(sc::kSuccess), static_cast<uint32_t>(n), 0};
  }

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

Result<std::unique_ptr<Controller>> Controller::Start(Store* store, ControllerOptions options) {
  if (options.max_io_queues < 1 || options.max_io_queues >= kMaxQueues) {
    return InvalidArgumentError("NVMe-KV controller: I/O queues must be 1.." +
                                std::to_string(kMaxQueues - 1));
  }
  if (options.max_queue_entries < 2 || options.max_queue_entries > 4096) {
    return InvalidArgumentError("NVMe-KV controller: queue entries must be 2..4096");
  }
  if (options.workers < 1 || options.workers > 256) {
    return InvalidArgumentError("NVMe-KV controller: workers must be 1..256");
  }
  if (options.data_bytes == 0 || options.max_value_bytes > options.data_bytes) {
    return InvalidArgumentError(
        "NVMe-KV controller: the largest value (" + std::to_string(options.max_value_bytes) +
        " bytes) must fit the data region (" + std::to_string(options.data_bytes) + " bytes)");
  }
  size_t per_pair = QueuePairBytes(options.max_queue_entries);
  OC_ASSIGN_OR_RETURN(
      SharedMemory mem,
      SharedMemory::Create(options.shm_name, per_pair * (options.max_io_queues + 1u),
                           options.data_bytes, options.replace_existing));
  auto impl = std::make_unique<Impl>(store, std::move(options), std::move(mem));
  impl->Begin();
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() { Stop(); }
void Controller::Stop() { impl_->Stop(); }
const ControllerCounters& Controller::counters() const { return impl_->counters(); }
const SharedMemory& Controller::memory() const { return impl_->memory(); }

}  // namespace objectcache::nvmekv
