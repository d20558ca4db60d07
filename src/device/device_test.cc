// Devices: the emulated one everywhere; the CUDA one where a GPU and driver are present (the
// same tests), and without a driver, a clean Unavailable.
#include "objectcache/device.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

namespace objectcache::device {
namespace {

using namespace std::chrono_literals;

TEST(CudaDeviceTest, WithoutADriverEveryBuildAnswersUnavailable) {
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(lib);
    GTEST_SKIP() << "a CUDA driver is installed here";
  }
  Result<std::shared_ptr<Device>> d = OpenCudaDevice(0);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), StatusCode::kUnavailable) << d.error().ToString();
  EXPECT_NE(d.error().message().find("libcuda.so.1"), std::string::npos) << d.error().ToString();
  EXPECT_EQ(OpenDevice("cuda:0").error().code(), StatusCode::kUnavailable);
}

TEST(OpenDeviceTest, NamesAreParsed) {
  EXPECT_TRUE(OpenDevice("emulated").has_value());
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:99999"}) {
    EXPECT_EQ(OpenDevice(bad).error().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// Pinned host memory, freed with its device.
struct Pinned {
  Pinned(Device& d, uint64_t bytes) : device(d), p(*d.AllocatePinned(bytes)), n(bytes) {}
  ~Pinned() { device.FreePinned(p); }
  std::span<std::byte> span() { return {p, n}; }
  Device& device;
  std::byte* p;
  uint64_t n;
};

void Fill(std::span<std::byte> b, uint32_t seed) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 131 + seed) >> 3);
}

class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "emulated") {
      device_ = NewEmulatedDevice({.copy_delay = 2ms});
      return;
    }
    Result<std::shared_ptr<Device>> d = OpenCudaDevice(0);
    if (!d) GTEST_SKIP() << d.error().ToString();
    device_ = *d;
  }
  std::shared_ptr<Device> device_;
};

INSTANTIATE_TEST_SUITE_P(Devices, DeviceTest, ::testing::Values("emulated", "cuda"),
                         [](const auto& param_info) { return param_info.param; });

TEST_P(DeviceTest, BytesGoThereAndBack) {
  Device& d = *device_;
  const uint64_t n = 1 << 20;
  Pinned in(d, n), out(d, n);
  Fill(in.span(), 7);
  std::memset(out.p, 0, n);
  DevicePtr mem = *d.Allocate(n);
  auto stream = *d.NewStream();
  auto done = *d.NewEvent();
  ASSERT_TRUE(d.CopyToDevice(*stream, mem, in.p, n).ok());
  ASSERT_TRUE(d.CopyToHost(*stream, out.p, mem, n).ok());
  ASSERT_TRUE(d.Record(*done, *stream).ok());
  ASSERT_TRUE(d.Wait(*done).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p, n), 0);
  EXPECT_TRUE(*d.Done(*done));
  d.Free(mem);
}

TEST_P(DeviceTest, FreedPinnedMemoryServesTheNextRequest) {
  // Pinning is what a request's staging would pay each time: a CUDA device keeps freed blocks.
  Device& d = *device_;
  std::byte* a = *d.AllocatePinned(3 << 20);
  std::byte* b = *d.AllocatePinned(3 << 20);
  EXPECT_NE(a, b);
  d.FreePinned(a);
  std::byte* c = *d.AllocatePinned(3 << 20);
  if (!d.emulated()) {
    EXPECT_EQ(c, a);
  }
  std::memset(c, 1, 3 << 20);  // all of it is usable
  d.FreePinned(b);
  d.FreePinned(c);
  EXPECT_FALSE(d.AllocatePinned(0).has_value());
  EXPECT_FALSE(d.AllocatePinned(UINT64_MAX).has_value());
}

TEST_P(DeviceTest, AnEventCompletesOnlyWhenTheWorkBeforeItHas) {
  Device& d = *device_;
  const uint64_t n = 4 << 20;
  Pinned in(d, n), out(d, n);
  Fill(in.span(), 3);
  DevicePtr mem = *d.Allocate(n);
  auto stream = *d.NewStream();
  auto event = *d.NewEvent();
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(d.CopyToDevice(*stream, mem, in.p, n).ok());
  ASSERT_TRUE(d.CopyToHost(*stream, out.p, mem, n).ok());
  ASSERT_TRUE(d.Record(*event, *stream).ok());
  // Whenever the event says done, the copy before it is complete.
  while (!*d.Done(*event)) std::this_thread::yield();
  EXPECT_EQ(std::memcmp(in.p, out.p, n), 0);
  d.Free(mem);
}

TEST_P(DeviceTest, AStreamWaitsForAnotherStreamsEventWithoutTheHost) {
  Device& d = *device_;
  const uint64_t n = 1 << 20;
  Pinned in(d, n), out(d, n);
  Fill(in.span(), 5);
  DevicePtr mem = *d.Allocate(n);
  auto producer = *d.NewStream();
  auto consumer = *d.NewStream();
  auto written = *d.NewEvent();
  auto read = *d.NewEvent();
  ASSERT_TRUE(d.CopyToDevice(*producer, mem, in.p, n).ok());
  ASSERT_TRUE(d.Record(*written, *producer).ok());
  ASSERT_TRUE(d.StreamWait(*consumer, *written).ok());
  ASSERT_TRUE(d.CopyToHost(*consumer, out.p, mem, n).ok());
  ASSERT_TRUE(d.Record(*read, *consumer).ok());
  ASSERT_TRUE(d.Wait(*read).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p, n), 0);
  d.Free(mem);
}

TEST_P(DeviceTest, ScatterAndGatherMoveEverySegmentAndNothingElse) {
  Device& d = *device_;
  // 64 segments of varied sizes and alignments, spread over device memory in reverse order.
  std::vector<CopySegment> segments;
  uint64_t src = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    const uint64_t bytes = (i % 3 == 0) ? 4096 : 1000 + i;  // aligned and unaligned ones
    segments.push_back({.src = src, .dst = (63 - i) * 8192 + (i % 2) * 3, .bytes = bytes});
    src += bytes;
  }
  const uint64_t host_bytes = src, device_bytes = 64 * 8192;
  Pinned in(d, host_bytes), back(d, host_bytes), whole(d, device_bytes), zeros(d, device_bytes);
  Fill(in.span(), 9);
  std::memset(back.p, 0, host_bytes);
  std::memset(zeros.p, 0xEE, device_bytes);
  DevicePtr mem = *d.Allocate(device_bytes);
  auto stream = *d.NewStream();
  auto done = *d.NewEvent();
  auto table = *d.UploadSegments(segments);
  ASSERT_EQ(table->size(), 64u);
  ASSERT_TRUE(d.CopyToDevice(*stream, mem, zeros.p, device_bytes).ok());
  ASSERT_TRUE(d.Scatter(*stream, mem, in.p, host_bytes, *table, segments.size()).ok());
  ASSERT_TRUE(d.Gather(*stream, back.p, host_bytes, mem, *table, segments.size()).ok());
  ASSERT_TRUE(d.CopyToHost(*stream, whole.p, mem, device_bytes).ok());
  ASSERT_TRUE(d.Record(*done, *stream).ok());
  ASSERT_TRUE(d.Wait(*done).ok());
  EXPECT_EQ(std::memcmp(in.p, back.p, host_bytes), 0);
  // Every device byte is its segment's or untouched.
  std::vector<bool> covered(device_bytes);
  for (const CopySegment& s : segments) {
    ASSERT_EQ(std::memcmp(whole.p + s.dst, in.p + s.src, s.bytes), 0);
    for (uint64_t k = 0; k < s.bytes; ++k) covered[s.dst + k] = true;
  }
  for (uint64_t k = 0; k < device_bytes; ++k) {
    if (!covered[k]) {
      ASSERT_EQ(whole.p[k], std::byte{0xEE}) << k;
    }
  }
  // A prefix of the table moves only its segments.
  ASSERT_TRUE(d.CopyToDevice(*stream, mem, zeros.p, device_bytes).ok());
  ASSERT_TRUE(d.Scatter(*stream, mem, in.p, host_bytes, *table, 1).ok());
  ASSERT_TRUE(d.CopyToHost(*stream, whole.p, mem, device_bytes).ok());
  ASSERT_TRUE(d.Synchronize(*stream).ok());
  EXPECT_EQ(std::memcmp(whole.p + segments[0].dst, in.p, segments[0].bytes), 0);
  EXPECT_EQ(whole.p[segments[1].dst], std::byte{0xEE});
  EXPECT_EQ(d.Scatter(*stream, mem, in.p, host_bytes, *table, 65).code(),
            StatusCode::kInvalidArgument);
  d.Free(mem);
}

TEST_P(DeviceTest, AnEngineStreamIsReachedByItsHandle) {
  Device& d = *device_;
  auto own = *d.NewStream();
  auto wrapped = d.WrapStream(own->handle());
  ASSERT_TRUE(wrapped.has_value()) << wrapped.error().ToString();
  EXPECT_EQ((*wrapped)->handle(), own->handle());
  EXPECT_TRUE(d.WrapStream(0).has_value());  // the default stream
}

TEST(EmulatedDeviceTest, CopiesRunLaterThanTheCallsThatEnqueueThem) {
  auto d = NewEmulatedDevice({.copy_delay = 200ms});
  Pinned in(*d, 4096), out(*d, 4096);
  Fill(in.span(), 1);
  std::memset(out.p, 0, 4096);
  DevicePtr mem = *d->Allocate(4096);
  auto stream = *d->NewStream();
  auto event = *d->NewEvent();
  ASSERT_TRUE(d->CopyToDevice(*stream, mem, in.p, 4096).ok());
  ASSERT_TRUE(d->CopyToHost(*stream, out.p, mem, 4096).ok());
  ASSERT_TRUE(d->Record(*event, *stream).ok());
  EXPECT_FALSE(*d->Done(*event));  // 400 ms of copies are still ahead of it
  ASSERT_TRUE(d->Wait(*event).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p, 4096), 0);
  EXPECT_EQ(d->Counters().bytes_to_device, 4096u);
  d->Free(mem);
}

TEST(EmulatedDeviceTest, AnAccessOutsideDeviceMemoryFaultsTheDevice) {
  auto d = NewEmulatedDevice();
  Pinned in(*d, 8192);
  DevicePtr mem = *d->Allocate(4096);
  auto stream = *d->NewStream();
  ASSERT_TRUE(d->CopyToDevice(*stream, mem + 1, in.p, 4096).ok());  // one byte past the end
  EXPECT_EQ(d->Synchronize(*stream).code(), StatusCode::kInternal);
  EXPECT_EQ(d->CopyToDevice(*stream, mem, in.p, 16).code(), StatusCode::kInternal);  // sticky
}

TEST(EmulatedDeviceTest, MemoryIsBounded) {
  auto d = NewEmulatedDevice({.memory_bytes = 1 << 20});
  DevicePtr a = *d->Allocate(1 << 19);
  EXPECT_EQ(d->Allocate((1 << 19) + 1).error().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(d->Allocate(UINT64_MAX).error().code(), StatusCode::kResourceExhausted);
  d->Free(a);
  EXPECT_TRUE(d->Allocate(1 << 20).has_value());
  auto unknown = NewEmulatedDevice()->WrapStream(777);
  EXPECT_EQ(unknown.error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace objectcache::device
