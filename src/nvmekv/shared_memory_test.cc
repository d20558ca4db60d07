// The shared segment seen through two mappings, as a host in the controller's own process sees
// it: bytes written through one appear through the other, a word stored through one orders the
// data before it for a thread that loads the word through the other, and a segment cut short
// under threads that use it is given its size back without ending the process.
#include "nvmekv/shared_memory.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "nvmekv/kv_conformance.h"

namespace objectcache::nvmekv {
namespace {

// A segment as the controller creates it, and a second mapping of it as a host opens it.
class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = SharedMemory::Create(UniqueShmName(), kPageBytes, kPageBytes, false);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    controller_.emplace(std::move(*created));
    auto opened = SharedMemory::Open(controller_->name());
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    host_.emplace(std::move(*opened));
  }

  std::optional<SharedMemory> controller_, host_;
};

TEST_F(SharedMemoryTest, TwoMappingsShowTheSameBytes) {
  ASSERT_NE(controller_->base(), host_->base());
  std::memcpy(controller_->data_region().data(), "kv", 2);
  EXPECT_EQ(std::memcmp(host_->data_region().data(), "kv", 2), 0);
  controller_->Register32(reg::kCc).store(7);
  EXPECT_EQ(host_->Register32(reg::kCc).load(), 7u);
}

// The data region is written and the doorbell stored through the controller's mapping; another
// thread waits for the doorbell through the host's mapping and then reads the data. Under
// ThreadSanitizer this fails as a data race unless the word names the ordering (SharedWord): TSan
// matches a release and an acquire only at one virtual address.
TEST_F(SharedMemoryTest, AWordOrdersTheDataBeforeItAcrossMappings) {
  const size_t doorbell = SqTailDoorbell(1, kDoorbellStride);
  std::byte* data = controller_->data_region().data();
  std::byte seen{};
  std::thread reader([&] {
    while (host_->Register32(doorbell).load(std::memory_order_acquire) == 0) {
      std::this_thread::yield();
    }
    seen = data[100];
  });
  data[100] = std::byte{0x5A};
  controller_->Register32(doorbell).store(1, std::memory_order_release);
  reader.join();
  EXPECT_EQ(seen, std::byte{0x5A});
}

size_t SegmentSize(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return static_cast<size_t>(st.st_size);
}

// Regression: two threads faulted on a segment cut short; the first gave it its size back, and
// the second, finding the size intact, ended the process with SIGBUS. Here a thread writes the
// last page through each mapping while the segment is cut under them, 200 times: the writes go
// on, and every cut is repaired.
TEST_F(SharedMemoryTest, ThreadsFaultingOnACutSegmentTogetherAllGoOn) {
  const size_t size = controller_->size();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  auto write_last_page = [&](const SharedMemory& m) {
    auto* last = reinterpret_cast<std::atomic<uint64_t>*>(m.base() + size - 8);
    while (!stop.load(std::memory_order_relaxed)) {
      last->fetch_add(1, std::memory_order_relaxed);
      writes.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread a(write_last_page, std::cref(*controller_));
  std::thread b(write_last_page, std::cref(*host_));
  constexpr int kCuts = 200;
  int repaired = 0;
  for (int cut = 0; cut < kCuts; ++cut) {
    if (::ftruncate(controller_->fd(), kRegisterBytes) != 0) {
      ADD_FAILURE() << "ftruncate: " << std::strerror(errno);
      break;  // the writers are still to be stopped and joined
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (SegmentSize(controller_->fd()) != size && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    if (SegmentSize(controller_->fd()) == size) ++repaired;
  }
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(repaired, kCuts);
  EXPECT_GE(controller_->resizes() + host_->resizes(), static_cast<uint64_t>(kCuts));
  EXPECT_GT(writes.load(), 0u);
}

// The fault as the kernel reports an access past a segment's end (BUS_ADRERR at `addr`), sent to
// this thread: what a thread sees when its access faulted and the size was given back before its
// handler looked. False when it could not be sent.
bool FaultAt(const std::byte* addr) {
  siginfo_t info{};
  info.si_signo = SIGBUS;
  info.si_code = BUS_ADRERR;
  info.si_addr = const_cast<std::byte*>(addr);
  return ::syscall(SYS_rt_tgsigqueueinfo, ::getpid(), ::gettid(), SIGBUS, &info) == 0;
}

// The process did not go on: killed by the signal, or (under a sanitizer, whose handler comes
// before the guard's) ended by the sanitizer's report.
bool DidNotGoOn(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// A fault that finds the size intact is retried only after a recent resize; on a segment that
// has not changed (a fault no retry can cure) it still ends the process, as without the guard.
TEST_F(SharedMemoryTest, AFaultWithTheSizeIntactIsRetriedOnlyAfterAResize) {
  const std::byte* inside = host_->base() + host_->size() - 8;
  EXPECT_EXIT(
      {
        if (::ftruncate(controller_->fd(), static_cast<off_t>(controller_->size())) != 0) {
          std::_Exit(2);  // the same size: only its status changes
        }
        std::_Exit(FaultAt(inside) ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        std::this_thread::sleep_for(std::chrono::nanoseconds(SharedMemory::kResizeRetryNs) +
                                    std::chrono::milliseconds(100));
        std::_Exit(FaultAt(inside) ? 0 : 3);
      },
      DidNotGoOn, "");
}

}  // namespace
}  // namespace objectcache::nvmekv
