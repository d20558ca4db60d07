// The controller and the host initiator together, in one process (and one test with the
// controller in a child process that is killed).
#include "nvmekv/controller.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>

#include "nvmekv/host.h"
#include "nvmekv/kv_conformance.h"
#include "objectcache/store_registry.h"

namespace objectcache::nvmekv {
namespace {

StoreFactory MemFactory() {
  return {"mem", [](const std::string&) { return OpenStore("mem://"); }};
}

INSTANTIATE_TEST_SUITE_P(Stores, NvmeKvConformanceTest,
                         ::testing::Values(MemFactory(), StoreFactory{"file",
                                                                      [](const std::string& dir) {
                                                                        return OpenStore("file://" +
                                                                                         dir);
                                                                      }}),
                         [](const auto& param_info) { return param_info.param.name; });

// A store that forwards to another and can be told to fail, to hold every call at a gate, or to
// be slow: the controller's error paths and queue-full behaviour need a store that misbehaves.
class ScriptedStore final : public Store {
 public:
  explicit ScriptedStore(Store* inner) : inner_(inner) {}

  void FailWith(Status s) {
    std::lock_guard l(mu_);
    fail_ = std::move(s);
  }
  void CloseGate() {
    std::lock_guard l(mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    {
      std::lock_guard l(mu_);
      gate_open_ = true;
    }
    cv_.notify_all();
  }
  int waiting() {
    std::lock_guard l(mu_);
    return waiting_;
  }

  StoreCapabilities Capabilities() const override { return inner_->Capabilities(); }
  StoreUsage Usage() const override { return inner_->Usage(); }
  std::string Uri() const override { return "scripted+" + inner_->Uri(); }
  Status Put(std::string_view key, std::span<const std::byte> value, const PutOptions& o) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->Put(key, value, o);
  }
  Result<ObjectInfo> Stat(std::string_view key) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->Stat(key);
  }
  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->Retrieve(key, dest);
  }
  Status RetrieveRanges(std::span<RangeRead> reads) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->RetrieveRanges(reads);
  }
  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->Exist(keys);
  }
  Status Delete(std::string_view key) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->Delete(key);
  }
  Result<ListPage> List(const ListOptions& o) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->List(o);
  }
  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& o) override {
    return inner_->NewWriter(key, o);
  }
  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) override {
    OC_RETURN_IF_ERROR(Enter());
    return inner_->OpenReader(key);
  }

 private:
  Status Enter() {
    std::unique_lock l(mu_);
    ++waiting_;
    cv_.wait(l, [&] { return gate_open_; });
    --waiting_;
    return fail_;
  }

  Store* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_open_ = true;
  int waiting_ = 0;
  Status fail_;
};

class NvmeKvControllerTest : public ::testing::Test {
 protected:
  void Start(ControllerOptions options = {}, HostOptions host = {}) {
    if (options.data_bytes == ControllerOptions{}.data_bytes) options.data_bytes = 8 << 20;
    if (options.max_value_bytes == ControllerOptions{}.max_value_bytes)
      options.max_value_bytes = 1 << 20;
    auto d = StartTestDevice(&store_, options, host);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = std::move(*d);
  }
  Host& host() { return *device_.host; }
  QueuePair& io() { return host().io_queue(0); }
  DataBuffer Buffer(size_t n) {
    auto b = host().Allocate(n);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : DataBuffer();
  }
  CompletionStatus Run(QueuePair& q, const SubmissionEntry& e) {
    auto c = q.Execute(e);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->status() : CompletionStatus{7, 0xff};
  }
  // Within 5 s.
  bool Eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // The host goes (disabling the controller: the reset must complete) and a new one attaches to
  // the same segment and finds what the store keeps under "kept".
  void Reattach() {
    const std::string name = host().memory().name();
    device_.host.reset();
    auto again = Host::Attach({.shm_name = name, .timeout = std::chrono::milliseconds(1000)});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    device_.host = std::move(*again);
    auto e = KvExist(io(), TestKey("kept"));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_TRUE(*e);
  }

  std::unique_ptr<Store> mem_ = *OpenStore("mem://");
  ScriptedStore store_{mem_.get()};
  TestDevice device_;
};

TEST_F(NvmeKvControllerTest, EveryStatusCodeItSends) {
  Start();
  DataBuffer buf = Buffer(8192);
  Key key = TestKey("k");
  // Key sizes 0 and 17.
  SubmissionEntry e = ExistCommand(key);
  e.dw[11] = 0;
  EXPECT_EQ(Run(io(), e), Generic(sc::kInvalidKeySize));
  e.dw[11] = 17;
  EXPECT_EQ(Run(io(), e), Generic(sc::kInvalidKeySize));
  // Value larger than the namespace's largest.
  EXPECT_EQ(Run(io(), StoreCommand(key, 0, (1 << 20) + 1)), Generic(sc::kInvalidValueSize));
  // Missing keys.
  EXPECT_EQ(Run(io(), ExistCommand(key)), Generic(sc::kKeyDoesNotExist));
  EXPECT_EQ(Run(io(), RetrieveCommand(key, buf.offset(), 10)), Generic(sc::kKeyDoesNotExist));
  EXPECT_EQ(Run(io(), StoreCommand(key, buf.offset(), 1, kv::kStoreUpdateOnly)),
            Generic(sc::kKeyDoesNotExist));
  EXPECT_EQ(Run(io(), DeleteCommand(key)), Generic(sc::kSuccess));
  // Key Value Configuration: delete of a missing key fails.
  EXPECT_EQ(Run(host().admin_queue(), SetFeaturesCommand(admin::kFeatureKeyValueConfig, 1)),
            Generic(sc::kSuccess));
  auto cfg = host().Admin(GetFeaturesCommand(admin::kFeatureKeyValueConfig));
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->dw[0], 1u);
  EXPECT_EQ(Run(io(), DeleteCommand(key)), Generic(sc::kKeyDoesNotExist));
  // Key exists.
  EXPECT_EQ(Run(io(), StoreCommand(key, buf.offset(), 1)), Generic(sc::kSuccess));
  EXPECT_EQ(Run(io(), StoreCommand(key, buf.offset(), 1, kv::kStoreCreateOnly)),
            Generic(sc::kKeyExists));
  // Both store options at once, and a List buffer too small for its count.
  EXPECT_EQ(
      Run(io(), StoreCommand(key, buf.offset(), 1, kv::kStoreCreateOnly | kv::kStoreUpdateOnly)),
      Generic(sc::kInvalidField));
  EXPECT_EQ(Run(io(), ListCommand(key, buf.offset(), 3)), Generic(sc::kInvalidField));
  // Unknown opcodes, I/O and admin; a namespace that does not exist.
  SubmissionEntry unknown = ExistCommand(key);
  unknown.dw[0] = 0x7C;
  EXPECT_EQ(Run(io(), unknown), Generic(sc::kInvalidOpcode));
  SubmissionEntry unknown_admin;
  unknown_admin.dw[0] = 0x7F;
  EXPECT_EQ(Run(host().admin_queue(), unknown_admin), Generic(sc::kInvalidOpcode));
  SubmissionEntry other_ns = ExistCommand(key);
  other_ns.dw[1] = 2;
  EXPECT_EQ(Run(io(), other_ns), Generic(sc::kInvalidNamespace));
  // The store's own failures: damaged bytes, and anything else.
  store_.FailWith(DataLossError("checksum mismatch"));
  EXPECT_EQ(Run(io(), RetrieveCommand(key, buf.offset(), 10)), Generic(sc::kUnrecoveredError));
  store_.FailWith(UnavailableError("disk gone"));
  EXPECT_EQ(Run(io(), ExistCommand(key)), Generic(sc::kInternalError));
  store_.FailWith(Status::Ok());
  // Queue management (command specific status). Queue 1 is the only one granted.
  QueuePair& admin = host().admin_queue();
  EXPECT_EQ(Run(admin, CreateIoCqCommand(0, 16, 0)), CommandSpecific(sc::kInvalidQueueIdentifier));
  EXPECT_EQ(Run(admin, CreateIoCqCommand(1, 16, 0)), CommandSpecific(sc::kInvalidQueueIdentifier));
  EXPECT_EQ(Run(admin, CreateIoCqCommand(2, 16, 0)), CommandSpecific(sc::kInvalidQueueIdentifier));
  EXPECT_EQ(Run(admin, DeleteIoSqCommand(9)), CommandSpecific(sc::kInvalidQueueIdentifier));
  EXPECT_EQ(Run(admin, DeleteIoCqCommand(1)), CommandSpecific(sc::kInvalidQueueDeletion));
  EXPECT_EQ(Run(admin, SetFeaturesCommand(admin::kFeatureNumberOfQueues, 0)), Generic(0x0C));
  EXPECT_EQ(Run(admin, IdentifyCommand(0x05, 1, 0x00, buf.offset())), Generic(sc::kInvalidField));
  EXPECT_EQ(Run(admin, IdentifyCommand(0x05, 3, 0x01, buf.offset())),
            Generic(sc::kInvalidNamespace));
  EXPECT_EQ(Run(admin, DeleteIoSqCommand(1)), Generic(sc::kSuccess));
  EXPECT_EQ(Run(admin, CreateIoSqCommand(1, 16, 0, 9)),
            CommandSpecific(sc::kCompletionQueueInvalid));
  // A submission queue's size and memory are checked as a completion queue's are (its
  // completion queue 1 still stands; none of these is created).
  EXPECT_EQ(Run(admin, CreateIoSqCommand(1, 4096, 0, 1)), CommandSpecific(sc::kInvalidQueueSize));
  EXPECT_EQ(Run(admin, CreateIoSqCommand(1, 1, 0, 1)), CommandSpecific(sc::kInvalidQueueSize));
  EXPECT_EQ(Run(admin, CreateIoSqCommand(1, 16, 100, 1)), Generic(sc::kInvalidField));
  SubmissionEntry scattered_sq = CreateIoSqCommand(1, 16, 0, 1);
  scattered_sq.dw[11] &= ~1u;  // not physically contiguous
  EXPECT_EQ(Run(admin, scattered_sq), Generic(sc::kInvalidField));
  EXPECT_EQ(Run(admin, DeleteIoCqCommand(1)), Generic(sc::kSuccess));
  EXPECT_EQ(Run(admin, CreateIoCqCommand(1, 4096, 0)), CommandSpecific(sc::kInvalidQueueSize));
  EXPECT_EQ(Run(admin, CreateIoCqCommand(1, 1, 0)), CommandSpecific(sc::kInvalidQueueSize));
  EXPECT_EQ(Run(admin, CreateIoCqCommand(1, 16, 100)),
            Generic(sc::kInvalidField));  // not page aligned
  SubmissionEntry scattered = CreateIoCqCommand(1, 16, 0);
  scattered.dw[11] &= ~1u;  // not physically contiguous
  EXPECT_EQ(Run(admin, scattered), Generic(sc::kInvalidField));
}

TEST_F(NvmeKvControllerTest, CapacityExceeded) {
  std::string dir = MakeScratchDir();
  auto small = OpenStore("file://" + dir + "?capacity=64KiB");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  auto d = StartTestDevice(small->get(), {.data_bytes = 1 << 20, .max_value_bytes = 512 << 10});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  {
    auto buf = d->host->Allocate(128 << 10);
    ASSERT_TRUE(buf.ok());
    EXPECT_EQ(KvStore(d->host->io_queue(0), TestKey("big"), *buf, 128 << 10).code(),
              StatusCode::kResourceExhausted);
  }
  auto ns = d->host->IdentifyNamespace();
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(ns->size_bytes, 64u << 10);
  EXPECT_EQ(ns->max_value_length, 512u << 10);
  EXPECT_EQ(ns->max_key_length, 16u);
  d->Stop();
  RemoveTree(dir);
}

// Data pointers outside the data region get Data Transfer Error and nothing outside is written;
// a value larger than the buffer gives its first bytes and its whole size.
TEST_F(NvmeKvControllerTest, NothingIsWrittenOutsideTheDataRegionOrTheBuffer) {
  Start();
  std::span<std::byte> region = host().data_region();
  DataBuffer value = Buffer(10000);
  std::string v = TestValue(10000, 3);
  std::memcpy(value.bytes().data(), v.data(), v.size());
  ASSERT_TRUE(KvStore(io(), TestKey("v"), value, 10000).ok());
  // Everything but the value's own buffer is a known pattern from here on.
  DataBuffer out = Buffer(8192);
  std::vector<std::byte> before(region.begin(), region.end());
  for (size_t i = 0; i < region.size(); ++i) {
    if (i < value.offset() || i >= value.offset() + 10000) region[i] = std::byte{0xA5};
  }
  before.assign(region.begin(), region.end());
  uint64_t size = region.size();
  for (uint64_t ptr : {size - 100, size, size + 4096, UINT64_MAX - 10}) {
    EXPECT_EQ(Run(io(), RetrieveCommand(TestKey("v"), ptr, 4096)), Generic(sc::kDataTransferError));
    EXPECT_EQ(Run(io(), ListCommand(TestKey("v"), ptr, 4096)), Generic(sc::kDataTransferError));
    EXPECT_EQ(Run(io(), StoreCommand(TestKey("w"), ptr, 200)), Generic(sc::kDataTransferError));
    EXPECT_EQ(Run(host().admin_queue(), IdentifyCommand(1, 0, 0, ptr)),
              Generic(sc::kDataTransferError));
  }
  EXPECT_TRUE(std::equal(before.begin(), before.end(), region.begin()));
  // 4096 of the 10000 bytes: exactly those, and DW0 says 10000.
  auto c = io().Execute(RetrieveCommand(TestKey("v"), out.offset(), 4096));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->status().ok());
  EXPECT_EQ(c->dw[0], 10000u);
  for (size_t i = 0; i < region.size(); ++i) {
    bool in_out = i >= out.offset() && i < out.offset() + 4096;
    if (in_out) {
      ASSERT_EQ(region[i], static_cast<std::byte>(v[i - out.offset()])) << i;
    } else {
      ASSERT_EQ(region[i], before[i]) << "byte " << i << " outside the buffer was written";
    }
  }
}

// Thousands of commands through a queue of 8 entries: the tail and head wrap and the phase tag
// flips hundreds of times; every completion belongs to its command.
TEST_F(NvmeKvControllerTest, QueueWrapsAndPhaseFlips) {
  Start({.max_queue_entries = 8}, {.queue_entries = 8});
  DataBuffer buf = Buffer(64);
  for (int i = 0; i < 3000; ++i) {
    Key key = TestKey("w" + std::to_string(i % 50));
    std::string v = TestValue(64, static_cast<uint32_t>(i));
    std::memcpy(buf.bytes().data(), v.data(), 64);
    ASSERT_TRUE(KvStore(io(), key, buf, 64).ok()) << i;
    std::memset(buf.bytes().data(), 0, 64);
    auto n = KvRetrieve(io(), key, buf, 64);
    ASSERT_TRUE(n.ok()) << i << ": " << n.status().ToString();
    ASSERT_EQ(std::string_view(reinterpret_cast<const char*>(buf.bytes().data()), 64), v) << i;
  }
  EXPECT_EQ(io().commands(), 6000u);
}

// With the only worker held inside the store, nothing is fetched: the queue fills, further
// submitters wait for room, and everything completes once the store lets go.
TEST_F(NvmeKvControllerTest, AFullQueueWaitsForRoom) {
  Start({.max_queue_entries = 8, .workers = 1}, {.queue_entries = 8});
  ASSERT_TRUE(KvStore(io(), TestKey("x"), Buffer(1), 1).ok());
  store_.CloseGate();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 24; ++i) {
    threads.emplace_back([&] {
      auto e = KvExist(io(), TestKey("x"));
      if (e.ok() && *e) ok.fetch_add(1);
    });
  }
  // One command is inside the store; the host has placed 7 (entries - 1) since the last head it
  // heard of, and the other 17 threads wait for a slot.
  for (int i = 0; i < 3000 && (store_.waiting() < 1 || io().commands() < 1 + 7); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(store_.waiting(), 1);
  EXPECT_EQ(io().commands(), 1u + 7u);
  store_.OpenGate();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 24);
  EXPECT_EQ(io().commands(), 25u);
}

// Many queues, many threads per queue, values of many sizes: every byte comes back.
TEST_F(NvmeKvControllerTest, ManyQueuesAndThreads) {
  Start({.max_io_queues = 4, .max_queue_entries = 32, .workers = 6},
        {.io_queues = 4, .queue_entries = 32});
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      QueuePair& q = host().io_queue(t % 4);
      auto in = host().Allocate(20000);
      auto out = host().Allocate(20000);
      if (!in.ok() || !out.ok()) {
        failures++;
        return;
      }
      for (int i = 0; i < 150; ++i) {
        size_t size = static_cast<size_t>((i * 977 + t * 131) % 20000);
        std::string v = TestValue(size, static_cast<uint32_t>(t * 1000 + i));
        Key key = TestKey("t" + std::to_string(t) + "-" + std::to_string(i % 10));
        std::memcpy(in->bytes().data(), v.data(), size);
        if (!KvStore(q, key, *in, static_cast<uint32_t>(size)).ok()) failures++;
        auto n = KvRetrieve(q, key, *out, 20000);
        if (!n.ok() || *n != size || std::memcmp(out->bytes().data(), v.data(), size) != 0) {
          failures++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(NvmeKvControllerTest, ABatchRingsTheDoorbellOnce) {
  Start({}, {.queue_entries = 256});
  ASSERT_TRUE(KvStore(io(), TestKey("b"), Buffer(1), 1).ok());
  std::vector<SubmissionEntry> batch(200, ExistCommand(TestKey("b")));
  std::vector<CompletionEntry> out(batch.size());
  uint64_t before = io().doorbell_writes();
  ASSERT_TRUE(io().ExecuteBatch(batch, out).ok());
  EXPECT_EQ(io().doorbell_writes() - before, 1u);
  for (const CompletionEntry& c : out) EXPECT_TRUE(c.status().ok());
  // More than the queue holds: one write per wait for room, never one per command.
  std::vector<SubmissionEntry> big(1000, ExistCommand(TestKey("b")));
  std::vector<CompletionEntry> big_out(big.size());
  before = io().doorbell_writes();
  ASSERT_TRUE(io().ExecuteBatch(big, big_out).ok());
  EXPECT_LT(io().doorbell_writes() - before, 100u);
}

// Commands kept in flight: Submit rings once for a batch, Poll hands each completion over once;
// with every command id in flight, Submit refuses and submits nothing.
// Polls command `id` until its completion arrives. A count of spins ran out on a loaded machine
// before an idle controller woke; the 30 s bound only keeps a broken controller from hanging
// the test.
std::optional<CompletionEntry> PollUntilDone(QueuePair& q, uint16_t id) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::optional<CompletionEntry> c;
  while (!(c = q.Poll(id)) && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  return c;
}

TEST_F(NvmeKvControllerTest, AsynchronousSubmitAndPoll) {
  Start({.max_queue_entries = 8}, {.queue_entries = 8});
  ASSERT_TRUE(KvStore(io(), TestKey("a"), Buffer(1), 1).ok());
  std::vector<SubmissionEntry> batch = {ExistCommand(TestKey("a")), ExistCommand(TestKey("b")),
                                        ExistCommand(TestKey("a"))};
  std::vector<uint16_t> ids(3);
  uint64_t doorbells = io().doorbell_writes();
  ASSERT_TRUE(io().Submit(batch, ids).ok());
  EXPECT_EQ(io().doorbell_writes() - doorbells, 1u);
  std::vector<std::optional<CompletionEntry>> got(3);
  for (size_t i = 0; i < 3; ++i) got[i] = PollUntilDone(io(), ids[i]);
  ASSERT_TRUE(got[0] && got[1] && got[2]);
  EXPECT_TRUE(got[0]->status().ok());
  EXPECT_TRUE(IsKeyValueStatus(got[1]->status(), sc::kKeyDoesNotExist));
  EXPECT_TRUE(got[2]->status().ok());
  EXPECT_FALSE(io().Poll(ids[0]));  // handed over once
  EXPECT_FALSE(io().Poll(60000));   // not an id of this queue
  // Eight ids, all taken (their completions not polled yet): a ninth is refused.
  std::vector<SubmissionEntry> eight(8, ExistCommand(TestKey("a")));
  std::vector<uint16_t> eight_ids(8);
  ASSERT_TRUE(io().Submit(eight, eight_ids).ok());
  std::vector<uint16_t> one(1);
  EXPECT_EQ(io().Submit(std::span(eight).first(1), one).code(), StatusCode::kResourceExhausted);
  for (uint16_t id : eight_ids) {
    std::optional<CompletionEntry> c = PollUntilDone(io(), id);
    ASSERT_TRUE(c && c->status().ok());
  }
  EXPECT_TRUE(io().Submit(std::span(eight).first(1), one).ok());
}

// What a broken host does to its queues stays with it: the controller takes its fatal status
// within the completion timeout, a reset always completes, and the next host is served.
TEST_F(NvmeKvControllerTest, NoHostCanWedgeTheController) {
  using namespace std::chrono_literals;
  Start({.completion_timeout = 200ms}, {.timeout = 1000ms});
  auto fatal = [&] {
    return Eventually(
        [&] { return host().memory().Register32(reg::kCsts).load() & reg::kCstsFatal; });
  };
  auto reattach = [&] { Reattach(); };
  ASSERT_TRUE(KvStore(io(), TestKey("kept"), Buffer(3), 3).ok());
  // 1. A completion queue head doorbell outside the queue (the admin queue's).
  host().memory().Register32(CqHeadDoorbell(0, kDoorbellStride)).store(0xFFFFFFFF);
  EXPECT_FALSE(host().IdentifyNamespace().ok());
  EXPECT_TRUE(fatal());
  reattach();
  // 2. A host that stops reading its completions: its I/O completion queue looks full.
  ASSERT_TRUE(KvExist(io(), TestKey("kept")).ok());
  const uint32_t tail = io().raw().cq_head;  // where the next completion goes
  host()
      .memory()
      .Register32(CqHeadDoorbell(io().id(), kDoorbellStride))
      .store((tail + 1) % io().raw().entries);
  EXPECT_FALSE(KvExist(io(), TestKey("kept")).ok());
  EXPECT_TRUE(fatal());
  reattach();
  // 3. A submission queue tail doorbell outside the queue.
  host().memory().Register32(SqTailDoorbell(io().id(), kDoorbellStride)).store(0xFFFFFFFF);
  EXPECT_TRUE(fatal());
  reattach();
  EXPECT_EQ(device_.controller->counters().host_failures.load(), 3u);
}

// Regression: a host that cut the shared segment short ended the controller with SIGBUS at its
// next access past the cut. The access is caught, the segment gets its size, descriptor and
// identity registers back, and the next host is served; a host that grows it or writes over
// the descriptor is repaired the same way.
TEST_F(NvmeKvControllerTest, NoHostCanResizeTheSegmentUnderTheController) {
  using namespace std::chrono_literals;
  Start({.completion_timeout = 200ms}, {.timeout = 1000ms});
  ASSERT_TRUE(KvStore(io(), TestKey("kept"), Buffer(3), 3).ok());
  const size_t size = host().memory().size();
  auto repairs = [&] { return device_.controller->counters().segment_repairs.load(); };
  auto segment_size = [&] {
    struct stat st {};
    EXPECT_EQ(::fstat(host().memory().fd(), &st), 0);
    return static_cast<size_t>(st.st_size);
  };
  // 1. Cut to nothing: the controller's next look at its registers is past the end.
  ASSERT_EQ(::ftruncate(host().memory().fd(), 0), 0);
  EXPECT_TRUE(Eventually([&] { return repairs() >= 1; }));
  EXPECT_EQ(segment_size(), size);
  Reattach();
  // 2. Cut after the registers while the host stores: whichever side touches the cut first
  // (here the host, whose own mapping is guarded too) gives the segment its size back; the
  // command completes or fails, and the controller lives on.
  ASSERT_EQ(::ftruncate(host().memory().fd(), kRegisterBytes), 0);
  (void)KvStore(io(), TestKey("during"), Buffer(3), 3);
  EXPECT_EQ(segment_size(), size);
  Reattach();
  // 3. Grown by a page, and 4. the descriptor overwritten: both put back while idle.
  const uint64_t before = repairs();
  ASSERT_EQ(::ftruncate(host().memory().fd(), static_cast<off_t>(size + 4096)), 0);
  EXPECT_TRUE(Eventually([&] { return repairs() > before && segment_size() == size; }));
  Reattach();
  std::memset(host().memory().base() + reg::kSharedMap, 0xff, sizeof(SharedMapDescriptor));
  EXPECT_TRUE(Eventually([&] { return repairs() > before + 1; }));
  Reattach();
}

TEST_F(NvmeKvControllerTest, OneHostAtATimeAndReattach) {
  Start();
  std::string name = device_.host->memory().name();
  auto second = Host::Attach({.shm_name = name});
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(KvStore(io(), TestKey("kept"), Buffer(3), 3).ok());
  device_.host.reset();
  auto again = Host::Attach({.shm_name = name});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto e = KvExist((*again)->io_queue(0), TestKey("kept"));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(*e);
  EXPECT_EQ(device_.controller->counters().enables.load(), 2u);
  EXPECT_EQ((*again)->identity().namespaces, 1u);
  EXPECT_EQ(Host::Attach({.shm_name = "objectcache-test-none"}).status().code(),
            StatusCode::kNotFound);
}

// Not a test of its own: the controller process of the test below, which runs this binary
// again with only this test selected and OBJECTCACHE_TEST_CONTROLLER_SHM set. Its store never
// returns from a call, so every command stays in flight until the process is killed.
TEST(NvmeKvControllerChild, ServeWithAStoreThatNeverAnswers) {
  const char* name = std::getenv("OBJECTCACHE_TEST_CONTROLLER_SHM");
  if (name == nullptr) GTEST_SKIP() << "the controller process of the test below";
  alarm(60);  // ends by itself whatever the parent does
  auto mem = OpenStore("mem://");
  ScriptedStore stuck(mem->get());
  auto c = Controller::Start(
      &stuck, {.shm_name = name, .data_bytes = 1 << 20, .max_value_bytes = 1 << 16, .workers = 2});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  stuck.CloseGate();
  std::cout << "ready" << std::endl;
  pause();
}

// The controller dies with a command in flight: the host's wait ends with DeadlineExceeded
// naming the dead process, and later calls time out too; nothing hangs.
TEST(NvmeKvControllerDeathTest, InitiatorTimesOutWhenTheControllerIsKilled) {
  std::string name = UniqueShmName();
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    setenv("OBJECTCACHE_TEST_CONTROLLER_SHM", name.c_str(), 1);
    execl("/proc/self/exe", "nvmekv_test",
          "--gtest_filter=NvmeKvControllerChild.ServeWithAStoreThatNeverAnswers", nullptr);
    _exit(127);
  }
  close(out[1]);
  struct KillAtExit {
    pid_t pid;
    ~KillAtExit() {
      if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
    }
  } kill_at_exit{child};
  std::string said;
  char b;
  while (said.find("ready") == std::string::npos && read(out[0], &b, 1) == 1) said += b;
  close(out[0]);
  ASSERT_NE(said.find("ready"), std::string::npos) << said;
  auto host = Host::Attach({.shm_name = name, .timeout = std::chrono::milliseconds(1000)});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  Result<bool> in_flight = false;
  std::thread t([&] { in_flight = KvExist((*host)->io_queue(0), TestKey("z")); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  kill_at_exit.pid = -1;
  t.join();
  EXPECT_EQ(in_flight.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(in_flight.status().message().find("gone"), std::string::npos)
      << in_flight.status().message();
  EXPECT_EQ(KvExist((*host)->io_queue(0), TestKey("z")).status().code(),
            StatusCode::kDeadlineExceeded);
  host->reset();  // its bounded waits end too
  shm_unlink(("/" + name).c_str());
}

}  // namespace
}  // namespace objectcache::nvmekv
