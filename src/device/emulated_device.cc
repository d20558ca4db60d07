// The emulated device (include/objectcache/device.h): device memory is host memory of its own,
// each stream a worker thread that runs its operations in order, and events complete when a
// stream's worker reaches them. A device range outside every allocation is a fault, as on a GPU:
// the operation does nothing and the device's error is sticky (every later call returns it).
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "device/call_counter.h"
#include "objectcache/device.h"

namespace objectcache::device {
namespace {

// When an event was last recorded (generation) and which generation its stream has reached.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // guarded by mu
  uint64_t completed = 0;  // guarded by mu

  void Complete(uint64_t generation) {
    {
      std::lock_guard lock(mu);
      completed = std::max(completed, generation);
    }
    cv.notify_all();
  }
  uint64_t Recorded() {
    std::lock_guard lock(mu);
    return recorded;
  }
  void WaitFor(uint64_t generation) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= generation; });
  }
};

class EmulatedEvent final : public Event {
 public:
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

// One stream's worker: runs queued operations in order.
class StreamWorker {
 public:
  StreamWorker() : thread_([this] { Loop(); }) {}
  ~StreamWorker() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is queued first
  }

  void Enqueue(std::function<void()> op) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(op));
      ++enqueued_;
    }
    cv_.notify_all();
  }

  void Drain() {
    std::unique_lock lock(mu_);
    const uint64_t target = enqueued_;
    cv_.wait(lock, [&] { return finished_ >= target; });
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      op();
      {
        std::lock_guard lock(mu_);
        ++finished_;
      }
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  uint64_t enqueued_ = 0, finished_ = 0;     // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;                       // last: starts after what it uses
};

class EmulatedStream final : public Stream {
 public:
  explicit EmulatedStream(std::shared_ptr<StreamWorker> w) : worker(std::move(w)) {}
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(worker.get()); }
  std::shared_ptr<StreamWorker> worker;
};

class EmulatedTable final : public SegmentTable {
 public:
  explicit EmulatedTable(std::span<const CopySegment> s) : segments(s.begin(), s.end()) {}
  size_t size() const override { return segments.size(); }
  std::vector<CopySegment> segments;
};

class EmulatedDevice final : public Device, public std::enable_shared_from_this<EmulatedDevice> {
 public:
  explicit EmulatedDevice(EmulatedDeviceOptions options) : options_(options) {}
  ~EmulatedDevice() override {
    default_stream_.reset();
    for (auto& [p, bytes] : allocations_) std::free(reinterpret_cast<void*>(p));
  }

  std::string name() const override { return "emulated"; }
  bool emulated() const override { return true; }

  Result<DevicePtr> Allocate(uint64_t bytes) override {
    std::lock_guard lock(mu_);
    if (bytes == 0 || bytes > options_.memory_bytes - allocated_) {
      return ResourceExhaustedError("emulated device: " + std::to_string(bytes) +
                                    " bytes do not fit (" + std::to_string(allocated_) + " of " +
                                    std::to_string(options_.memory_bytes) + " in use)");
    }
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) return ResourceExhaustedError("emulated device: out of host memory");
    std::memset(p, 0, bytes);
    allocations_[reinterpret_cast<DevicePtr>(p)] = bytes;
    allocated_ += bytes;
    return reinterpret_cast<DevicePtr>(p);
  }

  void Free(DevicePtr p) override {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(p);
    if (it == allocations_.end()) return;
    allocated_ -= it->second;
    allocations_.erase(it);
    std::free(reinterpret_cast<void*>(p));
  }

  Result<std::byte*> AllocatePinned(uint64_t bytes) override {
    if (bytes == 0 || bytes > (uint64_t{1} << 46)) {
      return InvalidArgumentError("pinned allocation of " + std::to_string(bytes) + " bytes");
    }
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) return ResourceExhaustedError("out of host memory for staging");
    return static_cast<std::byte*>(p);
  }
  void FreePinned(std::byte* p) override { std::free(p); }

  Result<std::unique_ptr<Stream>> NewStream() override {
    auto worker = std::make_shared<StreamWorker>();
    std::lock_guard lock(mu_);
    streams_[reinterpret_cast<uintptr_t>(worker.get())] = worker;
    return std::unique_ptr<Stream>(new EmulatedStream(std::move(worker)));
  }

  Result<std::unique_ptr<Stream>> WrapStream(uintptr_t handle) override {
    std::lock_guard lock(mu_);
    if (handle == 0) {
      if (!default_stream_) default_stream_ = std::make_shared<StreamWorker>();
      return std::unique_ptr<Stream>(new EmulatedStream(default_stream_));
    }
    auto it = streams_.find(handle);
    std::shared_ptr<StreamWorker> worker = it == streams_.end() ? nullptr : it->second.lock();
    if (!worker) {
      return InvalidArgumentError("stream " + std::to_string(handle) +
                                  " is not a live stream of this emulated device");
    }
    return std::unique_ptr<Stream>(new EmulatedStream(std::move(worker)));
  }

  Result<std::unique_ptr<Event>> NewEvent() override {
    return std::unique_ptr<Event>(new EmulatedEvent);
  }

  Status CopyToDevice(Stream& stream, DevicePtr dst, const std::byte* host,
                      uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Ready());
    counter_.Count(&stream, 1, bytes, 0);
    Enqueue(stream, [this, dst, host, bytes] {
      if (Inside(dst, bytes)) std::memcpy(At(dst), host, bytes);
    });
    return Status();
  }

  Status CopyToHost(Stream& stream, std::byte* host, DevicePtr src, uint64_t bytes) override {
    OC_RETURN_IF_ERROR(Ready());
    counter_.Count(&stream, 1, 0, bytes);
    Enqueue(stream, [this, host, src, bytes] {
      if (Inside(src, bytes)) std::memcpy(host, At(src), bytes);
    });
    return Status();
  }

  Result<std::unique_ptr<SegmentTable>> UploadSegments(
      std::span<const CopySegment> segments) override {
    OC_RETURN_IF_ERROR(Ready());
    return std::unique_ptr<SegmentTable>(new EmulatedTable(segments));
  }

  Status Scatter(Stream& stream, DevicePtr dst, const std::byte* host, uint64_t host_bytes,
                 const SegmentTable& table, size_t count) override {
    OC_ASSIGN_OR_RETURN(const std::vector<CopySegment>* segments,
                        Segments(table, count, host_bytes));
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; ++i) bytes += (*segments)[i].bytes;
    counter_.Count(&stream, 2, bytes, 0);
    Enqueue(stream, [this, dst, host, segments, count] {
      for (size_t i = 0; i < count; ++i) {
        const CopySegment& s = (*segments)[i];
        if (!Inside(dst + s.dst, s.bytes)) return;
        std::memcpy(At(dst + s.dst), host + s.src, s.bytes);
      }
    });
    return Status();
  }

  Status Gather(Stream& stream, std::byte* host, uint64_t host_bytes, DevicePtr src,
                const SegmentTable& table, size_t count) override {
    OC_ASSIGN_OR_RETURN(const std::vector<CopySegment>* segments,
                        Segments(table, count, host_bytes));
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; ++i) bytes += (*segments)[i].bytes;
    counter_.Count(&stream, 2, 0, bytes);
    Enqueue(stream, [this, host, src, segments, count] {
      for (size_t i = 0; i < count; ++i) {
        const CopySegment& s = (*segments)[i];
        if (!Inside(src + s.dst, s.bytes)) return;
        std::memcpy(host + s.src, At(src + s.dst), s.bytes);
      }
    });
    return Status();
  }

  Status Record(Event& event, Stream& stream) override {
    OC_RETURN_IF_ERROR(Ready());
    auto state = static_cast<EmulatedEvent&>(event).state;
    uint64_t generation = 0;
    {
      std::lock_guard lock(state->mu);
      generation = ++state->recorded;
    }
    counter_.Count(&stream, 1);
    static_cast<EmulatedStream&>(stream).worker->Enqueue(
        [state, generation] { state->Complete(generation); });
    return Status();
  }

  Result<bool> Done(Event& event) override {
    OC_RETURN_IF_ERROR(Ready());
    EventState& s = *static_cast<EmulatedEvent&>(event).state;
    std::lock_guard lock(s.mu);
    return s.completed >= s.recorded;
  }

  Status Wait(Event& event) override {
    EventState& s = *static_cast<EmulatedEvent&>(event).state;
    const uint64_t generation = s.Recorded();
    counter_.Count(nullptr, 1);
    s.WaitFor(generation);
    return Ready();
  }

  Status StreamWait(Stream& stream, Event& event) override {
    OC_RETURN_IF_ERROR(Ready());
    auto state = static_cast<EmulatedEvent&>(event).state;
    const uint64_t generation = state->Recorded();
    counter_.Count(&stream, 1);
    static_cast<EmulatedStream&>(stream).worker->Enqueue(
        [state, generation] { state->WaitFor(generation); });
    return Status();
  }

  Status Synchronize(Stream& stream) override {
    counter_.Count(&stream, 1);
    static_cast<EmulatedStream&>(stream).worker->Drain();
    return Ready();
  }

  DeviceCounters Counters() const override { return counter_.Get(); }

 private:
  // The device's sticky error, if a fault happened.
  Status Ready() const {
    std::lock_guard lock(mu_);
    return fault_;
  }
  // A copy operation: waits copy_delay on the stream's worker, then runs.
  void Enqueue(Stream& stream, std::function<void()> copy) {
    static_cast<EmulatedStream&>(stream).worker->Enqueue(
        [delay = options_.copy_delay, copy = std::move(copy)] {
          if (delay.count() > 0) std::this_thread::sleep_for(delay);
          copy();
        });
  }
  Result<const std::vector<CopySegment>*> Segments(const SegmentTable& table, size_t count,
                                                   uint64_t host_bytes) {
    OC_RETURN_IF_ERROR(Ready());
    const auto& segments = static_cast<const EmulatedTable&>(table).segments;
    if (count > segments.size()) {
      return InvalidArgumentError("more segments asked for than the table holds");
    }
    for (size_t i = 0; i < count; ++i) {
      const CopySegment& s = segments[i];
      if (s.src > host_bytes || s.bytes > host_bytes - s.src) {
        return InvalidArgumentError("a segment lies outside the host buffer");
      }
    }
    return &segments;
  }
  // Whether [p, p + bytes) lies inside one allocation; if not, the device faults.
  bool Inside(DevicePtr p, uint64_t bytes) {
    std::lock_guard lock(mu_);
    auto it = allocations_.upper_bound(p);
    if (it != allocations_.begin()) {
      --it;
      if (p - it->first <= it->second && bytes <= it->second - (p - it->first)) return true;
    }
    if (fault_.ok()) {
      fault_ = InternalError("emulated device: an access to " + std::to_string(bytes) +
                             " bytes at " + std::to_string(p) + " outside device memory");
    }
    return false;
  }
  static std::byte* At(DevicePtr p) { return reinterpret_cast<std::byte*>(p); }

  const EmulatedDeviceOptions options_;
  mutable std::mutex mu_;
  std::map<DevicePtr, uint64_t> allocations_;                 // guarded by mu_
  uint64_t allocated_ = 0;                                    // guarded by mu_
  std::map<uintptr_t, std::weak_ptr<StreamWorker>> streams_;  // guarded by mu_
  std::shared_ptr<StreamWorker> default_stream_;              // guarded by mu_
  CallCounter counter_;  // as many calls as the CUDA device makes for each operation
  Status fault_;         // guarded by mu_
};

}  // namespace

std::shared_ptr<Device> NewEmulatedDevice(EmulatedDeviceOptions options) {
  return std::make_shared<EmulatedDevice>(options);
}

Result<std::shared_ptr<Device>> OpenDevice(const std::string& spec) {
  if (spec == "emulated") return NewEmulatedDevice();
  if (spec == "cuda") return OpenCudaDevice(0);
  if (spec.starts_with("cuda:")) {
    const std::string n = spec.substr(5);
    if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos) {
      return OpenCudaDevice(std::stoi(n));
    }
  }
  return InvalidArgumentError("unknown device '" + spec + "' (emulated, cuda or cuda:N)");
}

}  // namespace objectcache::device
