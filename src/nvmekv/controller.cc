// The controller's workers (leader/follower polling), its queues and registers, enable, reset
// and failure; the commands they run are in controller_commands.cc.
#include <sys/prctl.h>

#include "nvmekv/controller_impl.h"

namespace objectcache::nvmekv {

void Controller::Impl::WorkerLoop() {
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

std::optional<Command> Controller::Impl::Lead() {
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

void Controller::Impl::SawWork() {
  last_work_ = Clock::now();
  sleep_ = std::max(opt_.poll_interval, std::chrono::microseconds(1));
}

void Controller::Impl::WriteIdentity() {
  uint64_t cap = uint64_t{opt_.max_queue_entries - 1} | reg::kCapContiguousQueues |
                 (uint64_t{10} << reg::kCapTimeoutShift) |
                 (uint64_t{kDoorbellStride} << reg::kCapDstrdShift) | reg::kCapIoCommandSets;
  mem_.Register64(reg::kCap).store(cap);
  mem_.Register32(reg::kVs).store(0x00020000);  // 2.0: I/O command sets
}

void Controller::Impl::RepairSegment() {
  const uint64_t resizes = mem_.resizes();
  const bool caught = resizes != seen_resizes_;
  seen_resizes_ = resizes;
  if (!mem_.Restore() && !caught) return;
  counters_.segment_repairs.fetch_add(1);
  WriteIdentity();
  if (enabled_) FailHost();
}

std::optional<Command> Controller::Impl::PollOnce() {
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

std::optional<SubmissionEntry> Controller::Impl::Fetch(SubmissionQueue& sq) {
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

void Controller::Impl::Post(SubmissionQueue& sq, uint16_t cid, const Outcome& o) {
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

std::optional<std::byte*> Controller::Impl::QueueMemory(uint64_t base, uint32_t entries,
                                                        size_t entry_bytes) {
  if (base % kPageBytes != 0 ||
      !RangeWithin(base, uint64_t{entries} * entry_bytes, mem_.queue_memory().size())) {
    return std::nullopt;
  }
  return mem_.queue_memory().data() + base;
}

std::optional<std::span<std::byte>> Controller::Impl::Data(uint64_t offset, uint64_t length) {
  std::span<std::byte> d = mem_.data_region();
  if (!RangeWithin(offset, length, d.size())) return std::nullopt;
  return d.subspan(offset, length);
}

void Controller::Impl::Enable(uint32_t cc) {
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
  auto cq = std::make_shared<CompletionQueue>(0, cq_entries, *cq_mem);
  cq->sq_refs = 1;
  auto sq = std::make_shared<SubmissionQueue>(0, sq_entries, *sq_mem, cq);
  mem_.Register32(SqTailDoorbell(0, kDoorbellStride)).store(0);
  mem_.Register32(CqHeadDoorbell(0, kDoorbellStride)).store(0);
  cqs_[0] = cq;
  sqs_[0] = sq;
  enabled_ = true;
  counters_.enables.fetch_add(1);
  mem_.Register32(reg::kCsts).store(reg::kCstsReady, std::memory_order_release);
}

void Controller::Impl::WaitIdle() {
  while (in_flight_.load() != 0 && !stopping_)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void Controller::Impl::FailHost() {
  if (host_failed_.exchange(true)) return;
  counters_.host_failures.fetch_add(1);
  MarkFatal();
}

void Controller::Impl::MarkFatal() {
  SharedWord<uint32_t> csts = mem_.Register32(reg::kCsts);
  csts.store(csts.load(std::memory_order_acquire) | reg::kCstsFatal, std::memory_order_release);
}

void Controller::Impl::Reset() {
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
  if (options.max_value_bytes == 0 || options.max_value_bytes > options.data_bytes) {
    return InvalidArgumentError("NVMe-KV controller: the largest value (" +
                                std::to_string(options.max_value_bytes) +
                                " bytes) must be above 0 and fit the data region (" +
                                std::to_string(options.data_bytes) + " bytes)");
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
