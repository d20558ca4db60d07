// A writer process for the crash test: opens a local store and runs the deterministic write
// storm of crash_workload.h until killed, printing "ack THREAD INDEX" after each operation the
// store acknowledged.
//
//   crash_writer DIR SEED
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "store/local/local_store.h"
#include "test/crash_workload.h"

using namespace objectcache;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_writer DIR SEED\n");
    return 2;
  }
  Result<std::unique_ptr<Store>> store = OpenLocalStore({.root = argv[1]});
  if (!store.has_value()) {
    std::fprintf(stderr, "crash_writer: %s\n", store.error().ToString().c_str());
    return 1;
  }
  const uint32_t seed = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  std::vector<std::thread> threads;
  for (int t = 0; t < crash::kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = 0;; ++i) {
        crash::Op op = crash::MakeOp(seed, t, i);
        Status s;
        if (op.is_delete) {
          s = (*store)->Delete(crash::KeyName(op.key));
          if (s.code() == StatusCode::kNotFound) s = Status();
        } else {
          std::string v = crash::MakeValue(op.key, op.version, op.size);
          s = (*store)->Put(crash::KeyName(op.key), AsBytes(v));
        }
        if (!s.ok()) {
          std::fprintf(stderr, "crash_writer: %s\n", s.ToString().c_str());
          std::_Exit(1);
        }
        // One write(2) per line: lines from the two threads never interleave.
        std::string line = "ack " + std::to_string(t) + " " + std::to_string(i) + "\n";
        if (::write(STDOUT_FILENO, line.data(), line.size()) < 0) std::_Exit(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
}
