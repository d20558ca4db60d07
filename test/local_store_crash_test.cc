// A writer process is killed with SIGKILL at random moments during a write storm, many times;
// after each kill the store is reopened and every object must be absent or bit-exact, and in
// the state the acknowledged operations (plus at most the one in flight per writer thread)
// left it in.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "store/local/local_store.h"
#include "store/scratch_dir.h"
#include "test/crash_workload.h"

namespace objectcache {
namespace {

using KeyState = std::optional<uint64_t>;  // version, or absent
using Model = std::array<KeyState, crash::kKeys>;

struct Writer {
  pid_t pid = -1;
  std::string output;
  std::thread reader;
};

void StartWriter(const std::string& dir, uint32_t seed, Writer* w) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  w->pid = ::fork();
  ASSERT_GE(w->pid, 0);
  if (w->pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::string seed_text = std::to_string(seed);
    ::execl(CRASH_WRITER_PATH, CRASH_WRITER_PATH, dir.c_str(), seed_text.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  w->reader = std::thread([fd = pipe_fds[0], w] {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) w->output.append(buf, n);
    ::close(fd);
  });
}

// Applies operation `op` to the model.
void Apply(const crash::Op& op, Model* m) {
  (*m)[op.key] = op.is_delete ? KeyState() : KeyState(op.version);
}

TEST(LocalStoreCrashTest, KilledWriterLeavesEveryObjectAbsentOrBitExact) {
  const std::string dir = MakeScratchDir();
  constexpr int kCycles = 60;
  Model model{};
  std::mt19937 rng(20261130);
  uint64_t total_acks = 0, inflight_landed = 0, removed_temp = 0;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    const uint32_t seed = static_cast<uint32_t>(cycle + 1);
    Writer w;
    StartWriter(dir, seed, &w);
    ASSERT_GT(w.pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 150));
    ASSERT_EQ(::kill(w.pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(w.pid, &wstatus, 0), w.pid);
    w.reader.join();
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer exited early: " << WEXITSTATUS(wstatus);

    // Replay what was acknowledged.
    std::array<int64_t, crash::kThreads> last_ack;
    last_ack.fill(-1);
    std::istringstream lines(w.output);
    std::string word;
    int thread;
    int64_t index;
    while (lines >> word >> thread >> index) {
      ASSERT_EQ(word, "ack");
      ASSERT_EQ(index, last_ack[thread] + 1) << "acks out of order";
      last_ack[thread] = index;
      total_acks++;
    }
    Model acked = model;
    for (int t = 0; t < crash::kThreads; ++t) {
      for (int64_t i = 0; i <= last_ack[t]; ++i) Apply(crash::MakeOp(seed, t, i), &acked);
    }
    // The one operation per thread that may have landed without its ack.
    Model with_inflight = acked;
    for (int t = 0; t < crash::kThreads; ++t) {
      Apply(crash::MakeOp(seed, t, static_cast<uint32_t>(last_ack[t] + 1)), &with_inflight);
    }

    LocalStoreOpenStats stats;
    Result<std::unique_ptr<Store>> store = OpenLocalStore({.root = dir}, &stats);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    removed_temp += stats.removed_temp_files;
    Model observed{};
    for (int k = 0; k < crash::kKeys; ++k) {
      Result<std::string> v = ReadWholeObject(**store, crash::KeyName(k));
      if (!v.has_value()) {
        ASSERT_EQ(v.error().code(), StatusCode::kNotFound) << v.error().ToString();
      } else {
        uint64_t version = 0;
        ASSERT_TRUE(crash::CheckValue(k, *v, &version))
            << "cycle " << cycle << ": key " << k << " is not bit-exact (" << v->size()
            << " bytes)";
        observed[k] = version;
      }
      ASSERT_TRUE(observed[k] == acked[k] || observed[k] == with_inflight[k])
          << "cycle " << cycle << " key " << k << ": acknowledged state lost";
      if (observed[k] != acked[k]) inflight_landed++;
    }
    ListPage all = *(*store)->List({.prefix = "", .start_after = "", .max_keys = 1000});
    size_t present = 0;
    for (const KeyState& s : observed) present += s.has_value();
    EXPECT_EQ(all.objects.size(), present) << "objects the writer never wrote";
    model = observed;
  }
  std::printf(
      "%d kills, %llu acknowledged operations, %llu unacknowledged operations landed "
      "whole, %llu partial writes discarded at reopen\n",
      kCycles, static_cast<unsigned long long>(total_acks),
      static_cast<unsigned long long>(inflight_landed),
      static_cast<unsigned long long>(removed_temp));
  EXPECT_GT(total_acks, 0u);
  RemoveTree(dir);
}

}  // namespace
}  // namespace objectcache
