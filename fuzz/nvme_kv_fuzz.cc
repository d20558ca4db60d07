// The NVMe-KV controller against arbitrary submission entries: each input is a run of 65-byte
// records, a queue selector and a whole 64-byte entry (opcode, NSID, key, key length, data
// pointer, sizes, options: anything), executed on the I/O queue or the admin queue of one
// controller over mem:// that lives for the whole run. Every command gets a completion with its
// own command id; nothing in the data region outside the buffer a command names changes; the
// controller never reads or writes outside its memory (ASan). Entries that would delete the
// host's own queue pair are skipped, so that later inputs still have a queue.
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nvmekv/controller.h"
#include "nvmekv/host.h"
#include "objectcache/store_registry.h"

namespace {

using namespace objectcache;
using namespace objectcache::nvmekv;

struct Device {
  std::unique_ptr<Store> store = *OpenStore("mem://");
  std::unique_ptr<Controller> controller;
  std::unique_ptr<Host> host;
  Device() {
    ControllerOptions o;
    o.shm_name = "objectcache-nvme-kv-fuzz-" + std::to_string(getpid());
    o.replace_existing = true;
    o.max_io_queues = 2;
    o.max_queue_entries = 16;
    o.data_bytes = 256 << 10;
    o.max_value_bytes = 64 << 10;
    o.workers = 2;
    o.busy_poll = std::chrono::microseconds(2000);
    controller = *Controller::Start(store.get(), o);
    static std::string name = o.shm_name;
    std::atexit([] { shm_unlink(("/" + name).c_str()); });  // the controller is never destroyed
    host = *Host::Attach({.shm_name = o.shm_name,
                          .io_queues = 1,
                          .queue_entries = 16,
                          .timeout = std::chrono::seconds(5)});
  }
};

// The bytes of the data region a command may write: [start, end), clipped to the region.
void Writable(const SubmissionEntry& e, bool admin, uint64_t region, uint64_t* start,
              uint64_t* end) {
  uint64_t length = 0;
  if (admin) {
    length = e.opcode() == admin::kIdentify ? kIdentifyBytes : 0;
  } else if (e.opcode() == kv::kRetrieve || e.opcode() == kv::kList ||
             e.opcode() == kv::kRetrieveRange) {
    length = e.dw[10];
  }
  *start = std::min(e.data_pointer(), region);
  *end = *start + std::min(length, region - *start);
}

// Whether bytes [from, to) of `now` and `before` are equal.
bool Same(std::span<const std::byte> now, const std::vector<std::byte>& before, uint64_t from,
          uint64_t to) {
  return from >= to || std::memcmp(now.data() + from, before.data() + from, to - from) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Device* device = new Device();  // one controller for the whole run
  std::span<std::byte> region = device->host->data_region();
  std::vector<std::byte> before(region.size());
  for (size_t at = 0; at + 65 <= size; at += 65) {
    const bool admin = data[at] & 1;
    SubmissionEntry e;
    std::memcpy(&e, data + at + 1, sizeof e);
    if (admin) {
      const uint16_t qid = e.dw[10] & 0xffff;
      const uint8_t op = e.opcode();
      if ((op == admin::kDeleteIoSq || op == admin::kDeleteIoCq) && qid == 1) continue;
    }
    QueuePair& q = admin ? device->host->admin_queue() : device->host->io_queue(0);
    std::memcpy(before.data(), region.data(), region.size());
    Result<CompletionEntry> c = q.Execute(e);
    if (!c.ok()) std::abort();  // every command is answered
    uint64_t start = 0, end = 0;
    Writable(e, admin, region.size(), &start, &end);
    // Only a command that succeeded may have written, and only inside its buffer.
    if (!c->status().ok()) start = end = 0;
    if (!Same(region, before, 0, start) || !Same(region, before, end, region.size())) {
      std::abort();
    }
    if (!admin && e.opcode() == kv::kStore && c->status().ok()) {
      (void)device->host->io_queue(0).Execute(DeleteCommand(KeyOf(e)));  // bounded memory
    }
  }
  return 0;
}
