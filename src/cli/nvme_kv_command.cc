#include "cli/nvme_kv_command.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>

#include "cli/cli_support.h"
#include "nvmekv/controller.h"
#include "nvmekv/host.h"
#include "objectcache/store_registry.h"

namespace objectcache::cli {
namespace {

using nvmekv::Host;
using nvmekv::Key;

constexpr const char* kDefaultShm = "objectcache-nvme-kv";

Result<Key> ParseKey(const std::string& text) {
  std::string hex = text;
  std::transform(hex.begin(), hex.end(), hex.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::optional<Key> k = Key::FromHex(hex);
  if (!k) {
    return InvalidArgumentError("key '" + text +
                                "' is not 1 to 16 bytes written as 2 to 32 hex digits");
  }
  return *k;
}

// Every key, or the first that is not one: nothing is sent before all are checked.
Result<std::vector<Key>> ParseKeys(const std::vector<std::string>& texts) {
  std::vector<Key> keys;
  for (const std::string& t : texts) {
    OC_ASSIGN_OR_RETURN(Key k, ParseKey(t));
    keys.push_back(k);
  }
  return keys;
}

// The flag every command to a running controller takes, and what it attaches to.
struct HostFlags {
  std::string shm = kDefaultShm;
};

Result<std::unique_ptr<Host>> Attach(const HostFlags& f) {
  auto h = Host::Attach({.shm_name = f.shm});
  if (!h.ok()) return h.status().Annotate("attaching to the NVMe-KV controller " + f.shm);
  return h;
}

void AddShmFlag(CLI::App* cmd, HostFlags* f) {
  cmd->add_option("--shm", f->shm, "The controller's shared-memory name (under /dev/shm)");
}

struct ServeFlags {
  std::string store, shm = kDefaultShm, prefix, data_size = "256MiB", max_value = "64MiB";
  bool replace = false;
  uint16_t queues = 16;
  uint32_t queue_entries = 1024;
  int workers = 8;
  uint32_t busy_poll_us = 1000, poll_us = 10, max_poll_us = 1000;
};

Status Serve(const ServeFlags& f) {
  nvmekv::ControllerOptions o;
  o.shm_name = f.shm;
  o.replace_existing = f.replace;
  o.name_prefix = f.prefix;
  o.max_io_queues = f.queues;
  o.max_queue_entries = f.queue_entries;
  OC_ASSIGN_OR_RETURN(uint64_t data, ParseByteSize(f.data_size));
  OC_ASSIGN_OR_RETURN(uint64_t max_value, ParseByteSize(f.max_value));
  if (max_value > UINT32_MAX) return InvalidArgumentError("--max-value: at most 4GiB - 1");
  o.data_bytes = data;
  o.max_value_bytes = static_cast<uint32_t>(max_value);
  o.workers = f.workers;
  o.busy_poll = std::chrono::microseconds(f.busy_poll_us);
  o.poll_interval = std::chrono::microseconds(f.poll_us);
  o.max_poll_interval = std::chrono::microseconds(std::max(f.max_poll_us, f.poll_us));
  // Blocked before any thread starts (the store's, the workers'): they inherit the mask, so
  // the signals reach sigwait below and the controller stops cleanly, unlinking its segment.
  const sigset_t signals = BlockSignals({SIGINT, SIGTERM});
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStoreFlag(f.store));
  OC_ASSIGN_OR_RETURN(auto controller, nvmekv::Controller::Start(store.get(), o));
  std::cerr << "objectcache nvme-kv: serving " << store->Uri()
            << " as NVMe-KV namespace 1 at /dev/shm/"
            << (f.shm.starts_with('/') ? f.shm.substr(1) : f.shm) << " (" << o.max_io_queues
            << " I/O queues of up to " << o.max_queue_entries << " entries, " << (data >> 20)
            << " MiB data region, values up to " << (max_value >> 10) << " KiB, " << o.workers
            << " workers)" << std::endl;
  int sig = 0;
  sigwait(&signals, &sig);
  controller->Stop();
  const auto& c = controller->counters();
  std::cerr << "objectcache nvme-kv: stopped after " << c.io_commands.load() << " I/O and "
            << c.admin_commands.load() << " admin commands (" << c.errors.load()
            << " with an error status)" << std::endl;
  return Status();
}

void AddServe(CLI::App* parent) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = AddCommand(
      parent, "serve", "Run the NVMe-KV controller over a store until SIGINT or SIGTERM", f, Serve);
  AddStoreFlag(cmd, &f->store);
  cmd->add_option("--shm", f->shm, "Shared-memory name to create (under /dev/shm)");
  cmd->add_flag("--replace", f->replace, "Remove a stale segment of the same name first");
  cmd->add_option("--prefix", f->prefix,
                  "Store-name prefix of every key (BUCKET/ shares the gateway's chunks of BUCKET)");
  cmd->add_option("--queues", f->queues, "Most I/O queue pairs a host may create (1-63)");
  cmd->add_option("--queue-entries", f->queue_entries, "Largest queue (CAP.MQES + 1), 2-4096");
  cmd->add_option("--data-size", f->data_size, "Data region size");
  cmd->add_option("--max-value", f->max_value, "Largest value a Store may carry");
  cmd->add_option("--workers", f->workers, "Threads that poll and run commands");
  cmd->add_option("--busy-poll-us", f->busy_poll_us, "Spin this long after the last command");
  cmd->add_option("--poll-us", f->poll_us, "First sleep between idle polls");
  cmd->add_option("--max-poll-us", f->max_poll_us, "Longest sleep between idle polls (back-off)");
}

Status Identify(const HostFlags& f) {
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  OC_ASSIGN_OR_RETURN(nvmekv::KeyValueNamespace ns, host->IdentifyNamespace());
  const nvmekv::ControllerIdentity& id = host->identity();
  std::cout << "model: " << id.model << "\nserial: " << id.serial << "\nfirmware: " << id.firmware
            << "\nmax queue entries: " << host->max_queue_entries()
            << "\nnamespace capacity bytes: " << ns.size_bytes
            << (ns.size_bytes == 0 ? " (unbounded)" : "")
            << "\nnamespace used bytes: " << ns.used_bytes
            << "\nmax key length: " << ns.max_key_length
            << "\nmax value length: " << ns.max_value_length << "\n";
  return Status();
}

struct StoreFlags : HostFlags {
  std::string key, file;
  bool create_only = false, update_only = false;
};

Status StoreValue(const StoreFlags& f) {
  OC_ASSIGN_OR_RETURN(Key k, ParseKey(f.key));
  OC_ASSIGN_OR_RETURN(std::string value,
                      ReadFile(f.file, UINT32_MAX));  // a value's length is 32 bits
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  OC_ASSIGN_OR_RETURN(nvmekv::DataBuffer buf, host->Allocate(value.size()));
  std::memcpy(buf.bytes().data(), value.data(), value.size());
  uint8_t options = (f.create_only ? nvmekv::kv::kStoreCreateOnly : 0) |
                    (f.update_only ? nvmekv::kv::kStoreUpdateOnly : 0);
  return KvStore(host->io_queue(0), k, buf, static_cast<uint32_t>(value.size()), options);
}

struct RetrieveFlags : HostFlags {
  std::string key, out = "-";
  uint64_t offset = 0;
  uint32_t length = 0;
};

Status Retrieve(const RetrieveFlags& f) {
  OC_ASSIGN_OR_RETURN(Key k, ParseKey(f.key));
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  if (f.offset > 0 && f.length == 0) return InvalidArgumentError("--offset needs --length");
  std::string value;
  if (f.length > 0) {
    OC_ASSIGN_OR_RETURN(nvmekv::DataBuffer buf, host->Allocate(f.length));
    OC_ASSIGN_OR_RETURN(uint32_t n, KvRetrieveRange(host->io_queue(0), k, buf, f.length, f.offset));
    value.assign(reinterpret_cast<const char*>(buf.bytes().data()), n);
  } else {
    OC_ASSIGN_OR_RETURN(nvmekv::KeyValueNamespace ns, host->IdentifyNamespace());
    OC_ASSIGN_OR_RETURN(nvmekv::DataBuffer buf, host->Allocate(ns.max_value_length));
    OC_ASSIGN_OR_RETURN(uint32_t n, KvRetrieve(host->io_queue(0), k, buf, ns.max_value_length));
    if (n > ns.max_value_length) {
      return ResourceExhaustedError("the value of " + k.ToHex() + " (" + std::to_string(n) +
                                    " bytes) is larger than the controller's largest value");
    }
    value.assign(reinterpret_cast<const char*>(buf.bytes().data()), n);
  }
  return WriteFileAtomically(f.out, value);
}

// exist and delete: keys, each checked before anything is sent.
struct KeysFlags : HostFlags {
  std::vector<std::string> keys;
};

Status Exist(const KeysFlags& f) {
  OC_ASSIGN_OR_RETURN(std::vector<Key> keys, ParseKeys(f.keys));
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  for (const Key& k : keys) {
    OC_ASSIGN_OR_RETURN(bool present, KvExist(host->io_queue(0), k));
    std::cout << (present ? "present " : "absent ") << k.ToHex() << "\n";
    if (!present) ExitCode() = kExitAbsent;
  }
  return Status();
}

Status Delete(const KeysFlags& f) {
  OC_ASSIGN_OR_RETURN(std::vector<Key> keys, ParseKeys(f.keys));
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  for (const Key& k : keys) OC_RETURN_IF_ERROR(KvDelete(host->io_queue(0), k));
  return Status();
}

struct ListFlags : HostFlags {
  std::string from = "00";
  size_t max = 1000;
};

Status List(const ListFlags& f) {
  OC_ASSIGN_OR_RETURN(Key start, ParseKey(f.from));
  OC_ASSIGN_OR_RETURN(auto host, Attach(f));
  constexpr uint32_t kBuffer = 64 << 10;
  OC_ASSIGN_OR_RETURN(nvmekv::DataBuffer buf, host->Allocate(kBuffer));
  size_t printed = 0;
  bool first_page = true;
  while (printed < f.max) {
    OC_ASSIGN_OR_RETURN(std::vector<Key> keys, KvList(host->io_queue(0), start, buf, kBuffer));
    // Later pages start at the last key printed: skip it.
    size_t skip = first_page ? 0 : 1;
    if (keys.size() <= skip) break;
    for (size_t i = skip; i < keys.size() && printed < f.max; ++i, ++printed) {
      std::cout << keys[i].ToHex() << "\n";
    }
    start = keys.back();
    first_page = false;
  }
  return Status();
}

void AddHostCommands(CLI::App* nvme) {
  auto identify = std::make_shared<HostFlags>();
  AddShmFlag(AddCommand(nvme, "identify", "Print the controller's and namespace's identity",
                        identify, Identify),
             identify.get());

  auto store = std::make_shared<StoreFlags>();
  CLI::App* cmd =
      AddCommand(nvme, "store", "Store FILE (- for stdin) under KEY", store, StoreValue);
  AddShmFlag(cmd, store.get());
  cmd->add_option("KEY", store->key, "Key: 2 to 32 hex digits")->required();
  cmd->add_option("FILE", store->file, "File to store, - for stdin")->required();
  cmd->add_flag("--create-only", store->create_only, "Fail if the key exists");
  cmd->add_flag("--update-only", store->update_only, "Fail if the key does not exist");

  auto retrieve = std::make_shared<RetrieveFlags>();
  cmd = AddCommand(nvme, "retrieve",
                   "Write KEY's value (or --length bytes from --offset) to stdout or --out FILE",
                   retrieve, Retrieve);
  AddShmFlag(cmd, retrieve.get());
  cmd->add_option("KEY", retrieve->key, "Key: 2 to 32 hex digits")->required();
  cmd->add_option("--out", retrieve->out, "Output file (- for stdout)");
  cmd->add_option("--offset", retrieve->offset,
                  "First byte, with --length (the vendor Retrieve Range)");
  cmd->add_option("--length", retrieve->length, "Bytes to read from --offset");

  auto exist = std::make_shared<KeysFlags>();
  cmd = AddCommand(nvme, "exist",
                   "Print 'present KEY' or 'absent KEY' for each key; exit 3 if any is absent",
                   exist, Exist);
  AddShmFlag(cmd, exist.get());
  cmd->add_option("KEY", exist->keys, "Keys: 2 to 32 hex digits each")->required();

  auto del = std::make_shared<KeysFlags>();
  cmd = AddCommand(nvme, "delete", "Delete keys (a missing key is not an error)", del, Delete);
  AddShmFlag(cmd, del.get());
  cmd->add_option("KEY", del->keys, "Keys: 2 to 32 hex digits each")->required();

  auto list = std::make_shared<ListFlags>();
  cmd = AddCommand(nvme, "list", "Print keys from --from on, in byte order", list, List);
  AddShmFlag(cmd, list.get());
  cmd->add_option("--from", list->from, "First key (hex)");
  cmd->add_option("--max", list->max, "Most keys to print");
}

}  // namespace

void AddNvmeKvCommands(CLI::App* app) {
  CLI::App* nvme = app->add_subcommand(
      "nvme-kv", "The NVMe key-value controller over a store, and its commands (docs/nvme-kv.md)");
  nvme->require_subcommand(1);
  AddServe(nvme);
  AddHostCommands(nvme);
}

}  // namespace objectcache::cli
