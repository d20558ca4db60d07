#include "store/rados/rados_store.h"

#include <rados/librados.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "store/backend_util.h"
#include "store/rados/rados_capacity.h"
#include "store/rados/rados_ops.h"

namespace objectcache {
namespace {

using namespace rados_internal;  // the librados pieces (rados_ops.h)

// The store's attributes live in this xattr of the object, written with the data.
constexpr char kAttributesXattr[] = "oc.attributes";
// Asynchronous operations in flight per call at most.
constexpr size_t kMaxInFlight = 256;

Status RadosError(std::string_view context, int r) {
  const int e = -r;
  switch (e) {
    case ERANGE:
    case EOVERFLOW:  // an asserted version did not match
      return Status(StatusCode::kAborted, std::string(context) + ": the object changed");
    case EFBIG:
    case E2BIG:
      return ResourceExhaustedError(std::string(context) + ": larger than the OSDs accept (" +
                                    std::strerror(e) + ")");
    case ENOTCONN:
    case ESHUTDOWN:
    case ECONNREFUSED:
    case ETIMEDOUT:
      return UnavailableError(std::string(context) + ": the cluster did not answer (" +
                              std::strerror(e) + ")");
    default:
      return ErrnoError(context, e);
  }
}

std::string Context(std::string_view what, std::string_view key) {
  std::string s(what);
  s += " '";
  s += key;
  s += "' in RADOS";
  return s;
}

// Makes `op` fail unless the object exists (-ENOENT) with exactly these attributes
// (-ECANCELED): the compare half of a compare-and-swap, checked by the OSD with the write.
// `storage` holds the compared bytes until the operation runs.
void AssertAttributes(librados::ObjectWriteOperation& op, std::string_view attributes,
                      librados::bufferlist* storage) {
  storage->append(attributes.data(), attributes.size());
  op.assert_exists();
  op.cmpxattr(kAttributesXattr, LIBRADOS_CMPXATTR_OP_EQ, *storage);
}

class RadosObjectReader;

class RadosStore final : public Store {
 public:
  RadosStore(std::unique_ptr<librados::Rados> cluster, librados::IoCtx io,
             RadosStoreOptions options)
      : cluster_(std::move(cluster)), io_(std::move(io)), options_(std::move(options)) {
    if (options_.capacity_bytes) {
      capacity_ = std::make_unique<RadosCapacity>(
          &io_, RadosCapacityOptions{.capacity_bytes = *options_.capacity_bytes,
                                     .atime_resolution_s = options_.atime_resolution_s,
                                     .evict_interval_ms = options_.evict_interval_ms});
    }
  }
  ~RadosStore() override {
    capacity_.reset();  // its thread uses io_
    io_.close();
    cluster_->shutdown();
  }

  StoreCapabilities Capabilities() const override {
    return {.ranged_reads = true,
            .persistent = true,
            .evicts = capacity_ != nullptr,
            .capacity_bytes = options_.capacity_bytes,
            .max_key_bytes = kMaxKeyBytes,
            .tracks_usage = capacity_ != nullptr,
            .pinned_readers = false,
            .conditional_put = true};
  }
  StoreUsage Usage() const override { return capacity_ ? capacity_->Usage() : StoreUsage{}; }
  std::string Uri() const override {
    std::string uri = "rados://" + options_.pool;
    if (!options_.ns.empty()) uri += "?namespace=" + options_.ns;
    if (options_.capacity_bytes) {
      uri += (options_.ns.empty() ? "?" : "&") + std::string("capacity=") +
             std::to_string(*options_.capacity_bytes);
    }
    return uri;
  }

  RadosCapacity* capacity() { return capacity_.get(); }

  // ReadRadosObjectsSequentially (rados_store.h): like `rados bench seq`, a new read is started
  // as soon as the oldest one completes.
  Result<RadosSequentialRead> ReadSequentially(std::span<const std::string> names, int in_flight) {
    if (in_flight < 1) return InvalidArgumentError("at least one read in flight");
    struct Read {
      Completion done;
      librados::bufferlist bl;
      size_t index = 0;
    };
    std::deque<Read> reads;
    RadosSequentialRead out;
    size_t next = 0;
    auto start = [&]() -> Status {
      OC_RETURN_IF_ERROR(ValidateKey(names[next]));
      Read& read = reads.emplace_back();
      read.index = next++;
      const int r =
          io_.aio_read(names[read.index], read.done.c.get(), &read.bl, kMaxRadosObjectBytes, 0);
      if (r < 0) {
        reads.pop_back();
        return RadosError(Context("reading", names[read.index]), r);
      }
      return Status();
    };
    const auto t0 = std::chrono::steady_clock::now();
    Status failed;
    while (failed.ok() && next < names.size() && reads.size() < static_cast<size_t>(in_flight)) {
      failed = start();
    }
    while (!reads.empty()) {
      Read& oldest = reads.front();
      const int r = oldest.done.Wait();
      if (r < 0 && failed.ok()) failed = RadosError(Context("reading", names[oldest.index]), r);
      out.bytes += oldest.bl.length();
      reads.pop_front();
      if (failed.ok() && next < names.size()) failed = start();
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    OC_RETURN_IF_ERROR(failed);
    return out;
  }

  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& options) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
    if (value.size() > kMaxRadosObjectBytes) {
      return ResourceExhaustedError(Context("storing", key) + ": " + std::to_string(value.size()) +
                                    " bytes exceed the RADOS backend's object limit of " +
                                    std::to_string(kMaxRadosObjectBytes));
    }
    // With capacity, the size it replaces, for the usage (rados_capacity.h).
    const std::optional<uint64_t> replaced = options.if_absent ? std::nullopt : SizeForUsage(key);
    librados::ObjectWriteOperation op;
    if (options.if_absent) op.create(/*exclusive=*/true);  // -EEXIST, and nothing written
    librados::bufferlist expected;
    if (options.if_attributes) AssertAttributes(op, *options.if_attributes, &expected);
    librados::bufferlist data = StaticBuffer(value);
    op.write_full(data);
    librados::bufferlist attributes, generation, atime;
    attributes.append(options.attributes);
    op.setxattr(kAttributesXattr, attributes);
    generation.append(NewGeneration());
    op.setxattr(kGenerationXattr, generation);
    atime.append(NowSeconds());
    op.setxattr(kAccessTimeXattr, atime);
    const int r = io_.operate(std::string(key), &op, kWriteFlags);
    if (r == 0 && capacity_) {
      capacity_->Changed(
          static_cast<int64_t>(value.size()) - static_cast<int64_t>(replaced.value_or(0)),
          replaced ? 0 : 1);
    }
    if (r == -EEXIST && options.if_absent) {
      return AlreadyExistsError(Context("storing", key) + ": the name exists");
    }
    if (r == -ECANCELED && options.if_attributes) {
      return FailedPreconditionError(Context("storing", key) + ": the object was replaced");
    }
    if (r < 0) return RadosError(Context("storing", key), r);
    return Status();
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    uint64_t size = 0;
    time_t mtime = 0;
    const int r = io_.stat(std::string(key), &size, &mtime);
    if (r < 0) return RadosError(Context("stat of", key), r);
    return ObjectInfo{std::string(key), size};
  }

  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    ObjectRead read;
    librados::bufferlist bl;
    int rval = 0;
    // Reads one byte more than fits, to tell "fits exactly" from "too large".
    read.op.read(0, dest.size() + 1, &bl, &rval);
    if (capacity_) read.ReadAccess();
    const int r = io_.operate(std::string(key), &read.op, nullptr);
    if (r < 0) return RadosError(Context("reading", key), r);
    if (capacity_) capacity_->TouchIfStale(std::string(key), read.Generation(), read.AccessTime());
    if (read.size > dest.size()) {
      return ResourceExhaustedError(Context("reading", key) + ": " + std::to_string(read.size) +
                                    "-byte object, " + std::to_string(dest.size()) +
                                    "-byte buffer");
    }
    if (bl.length() != read.size) return InternalError(Context("reading", key) + ": short read");
    CopyOut(bl, dest.first(read.size));
    return static_cast<size_t>(read.size);
  }

  Status RetrieveRanges(std::span<RangeRead> reads) override { return ReadRanges(reads, nullptr); }

  // Ranges that lie within one of librados's receive buffers stay there; one that spans two
  // (the reply's data arrived in pieces) is copied into its dest.
  Status RetrieveRangesInPlace(std::span<RangeRead> reads, HeldMemory* held) override {
    return ReadRanges(reads, held);
  }

  // RetrieveRanges, lending librados's buffers to `held` when it is not null.
  Status ReadRanges(std::span<RangeRead> reads, HeldMemory* held) {
    // One operation per distinct object: its size and all its ranges from one version, nearby
    // ranges in one read (ObjectRead::ReadRanges).
    std::map<std::string_view, std::unique_ptr<ObjectRead>> by_key;
    for (RangeRead& r : reads) {
      r.status = ValidateKey(r.key);
      if (!r.status.ok()) continue;
      auto& slot = by_key[r.key];
      if (!slot) {
        slot = std::make_unique<ObjectRead>();
        if (capacity_) slot->ReadAccess();
      }
      slot->ranges.push_back(&r);
    }
    for (auto& [key, read] : by_key) read->ReadRanges();
    return RunReads(by_key, [this, held](std::string_view key, ObjectRead& read, int r) {
      if (r >= 0 && capacity_) {
        capacity_->TouchIfStale(std::string(key), read.Generation(), read.AccessTime());
      }
      for (RangeRead* out : read.ranges) {
        out->status = r < 0 ? RadosError(Context("reading", key), r) : CheckRange(*out, read.size);
      }
      if (r < 0) return;
      for (ObjectRead::Extent& e : read.extents) {
        for (RangeRead* out : e.reads) {
          if (!out->status.ok()) continue;
          const uint64_t at = out->offset - e.offset;
          if (e.rval < 0 || e.bl->length() < at || e.bl->length() - at < out->dest.size()) {
            out->status = InternalError(Context("reading", key) + ": short read");
            continue;
          }
          out->data = held ? Contiguous(*e.bl, at, out->dest.size()) : std::span<const std::byte>();
          if (out->data.empty()) {
            CopyOut(*e.bl, out->dest, at);
            out->data = out->dest;
          } else if (!std::exchange(e.lent, true)) {
            held->push_back(e.bl);
          }
        }
      }
    });
  }

  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override {
    std::map<std::string_view, std::unique_ptr<ObjectRead>> by_key;
    for (std::string_view key : keys) {
      OC_RETURN_IF_ERROR(ValidateKey(key));
      auto& slot = by_key[key];
      if (!slot) slot = std::make_unique<ObjectRead>();
    }
    std::map<std::string_view, bool> present;
    Status failed;
    OC_RETURN_IF_ERROR(RunReads(by_key, [&](std::string_view key, ObjectRead&, int r) {
      if (r < 0 && r != -ENOENT && failed.ok()) failed = RadosError(Context("stat of", key), r);
      present[key] = r >= 0;
    }));
    OC_RETURN_IF_ERROR(failed);
    std::vector<bool> out;
    out.reserve(keys.size());
    for (std::string_view key : keys) out.push_back(present[key]);
    return out;
  }

  Status Delete(std::string_view key) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    const uint64_t size = SizeForUsage(key).value_or(0);
    librados::ObjectWriteOperation op;  // not IoCtx::remove, which passes its flags untranslated
    op.remove();
    const int r = io_.operate(std::string(key), &op, kWriteFlags);
    if (r < 0) return RadosError(Context("deleting", key), r);
    if (capacity_) capacity_->Changed(-static_cast<int64_t>(size), -1);
    return Status();
  }

  Status Pin(std::string_view key, int64_t until) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    // Raised only: the OSD sets oc.pin only if it holds an earlier time (absent reads as 0),
    // and never creates the object.
    librados::ObjectWriteOperation op;
    op.assert_exists();
    op.cmpxattr(kPinXattr, LIBRADOS_CMPXATTR_OP_GT,
                static_cast<uint64_t>(std::max<int64_t>(until, 0)));
    librados::bufferlist text;
    text.append(std::to_string(until));
    op.setxattr(kPinXattr, text);
    const int r = io_.operate(std::string(key), &op, kWriteFlags);
    if (r == -ECANCELED) return Status();  // pinned at least that long already
    if (r < 0) return RadosError(Context("pinning", key), r);
    return Status();
  }

  // With capacity, the size the object has now (before a put or delete changes it), for the
  // usage; unset when it is absent or there is no capacity.
  std::optional<uint64_t> SizeForUsage(std::string_view key) {
    uint64_t size = 0;
    time_t mtime = 0;
    if (capacity_ && io_.stat(std::string(key), &size, &mtime) == 0) return size;
    return std::nullopt;
  }

  Status DeleteIf(std::string_view key, std::string_view attributes) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    librados::ObjectWriteOperation op;
    librados::bufferlist expected;
    AssertAttributes(op, attributes, &expected);
    op.remove();
    const uint64_t size = SizeForUsage(key).value_or(0);
    const int r = io_.operate(std::string(key), &op, kWriteFlags);
    if (r == -ECANCELED) {
      return FailedPreconditionError(Context("deleting", key) + ": the object was replaced");
    }
    if (r < 0) return RadosError(Context("deleting", key), r);
    if (capacity_) capacity_->Changed(-static_cast<int64_t>(size), -1);
    return Status();
  }

  Result<ListPage> List(const ListOptions& options) override {
    // RADOS lists in hash order: enumerate the namespace, keep the candidates, sort.
    std::vector<ObjectInfo> candidates;
    try {
      for (auto it = io_.nobjects_begin(); it != io_.nobjects_end(); ++it) {
        const std::string& name = it->get_oid();
        if (!name.starts_with(options.prefix) || name == kControlObject) continue;
        if (!options.start_after.empty() && name <= options.start_after) continue;
        candidates.push_back({name, 0});
      }
    } catch (const std::exception& e) {
      return UnavailableError("listing RADOS pool " + options_.pool + ": " + e.what());
    }
    std::sort(candidates.begin(), candidates.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    if (candidates.size() > options.max_keys + 1) candidates.resize(options.max_keys + 1);
    // Sizes for the page only (an object deleted meanwhile drops out).
    std::vector<ObjectInfo> sized;
    std::map<std::string_view, std::unique_ptr<ObjectRead>> by_key;
    for (size_t i = 0; i < candidates.size() && i < options.max_keys; ++i) {
      auto& slot = by_key[candidates[i].key];
      slot = std::make_unique<ObjectRead>();
    }
    Status failed;
    OC_RETURN_IF_ERROR(RunReads(by_key, [&](std::string_view key, ObjectRead& read, int r) {
      if (r >= 0) {
        sized.push_back({std::string(key), read.size});
      } else if (r != -ENOENT && failed.ok()) {
        failed = RadosError(Context("stat of", key), r);
      }
    }));
    OC_RETURN_IF_ERROR(failed);
    ListPage page = FinishListPage(std::move(sized), options.max_keys);
    page.truncated = candidates.size() > options.max_keys;
    return page;
  }

  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& options) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
    return NewBufferedWriter(this, std::string(key), options, kMaxRadosObjectBytes);
  }

  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) override;

  // Reads one object's current version: size, mtime, attributes and version.
  Result<std::unique_ptr<ObjectRead>> StatWithAttributes(std::string_view key, uint64_t* version) {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    auto read = std::make_unique<ObjectRead>();
    read->op.getxattr(kAttributesXattr, &read->attributes, &read->attributes_rval);
    // An object written by another tool has no attributes xattr: that is "no attributes".
    read->op.set_op_flags2(LIBRADOS_OP_FLAG_FAILOK);
    read->ReadAccess();
    const std::string oid(key);
    read->done = Completion();
    int r = io_.aio_operate(oid, read->done.c.get(), &read->op, nullptr);
    if (r >= 0) r = read->done.Wait();
    if (r < 0) return RadosError(Context("opening", key), r);
    *version = read->done.c->get_version64();
    return read;
  }

  librados::IoCtx& io() { return io_; }

 private:
  // Starts every operation, at most kMaxInFlight at a time (when that many are in flight, the
  // next ones start once half of them are done: no batch waits for its slowest operation), waits
  // for them and calls done(key, read, return value) in key order. Fails only if an operation
  // cannot be started.
  template <typename Done>
  Status RunReads(std::map<std::string_view, std::unique_ptr<ObjectRead>>& by_key, Done done) {
    std::vector<std::pair<std::string_view, ObjectRead*>> started_reads;
    Status started;
    Countdown countdown;
    for (auto& [key, read] : by_key) {
      if (countdown.left() >= kMaxInFlight) countdown.WaitUntilAtMost(kMaxInFlight / 2);
      read->done = Completion(&countdown);
      countdown.Add();
      const int r = io_.aio_operate(std::string(key), read->done.c.get(), &read->op, nullptr);
      if (r < 0) {
        countdown.Done();
        if (started.ok()) started = RadosError(Context("reading", key), r);
        break;
      }
      started_reads.emplace_back(key, read.get());
    }
    countdown.WaitUntilAtMost(0);
    for (auto& [key, read] : started_reads) done(key, *read, read->done.c->get_return_value());
    return started;
  }

  std::unique_ptr<librados::Rados> cluster_;
  librados::IoCtx io_;
  RadosStoreOptions options_;
  std::unique_ptr<RadosCapacity> capacity_;  // with a capacity only
};

class RadosObjectReader final : public ObjectReader {
 public:
  RadosObjectReader(RadosStore* store, std::string key, uint64_t version, std::string generation,
                    uint64_t size, time_t mtime, std::string attributes)
      : store_(store),
        key_(std::move(key)),
        version_(version),
        generation_(std::move(generation)),
        size_(size),
        mtime_(mtime),
        attributes_(std::move(attributes)) {}

  uint64_t size() const override { return size_; }
  const std::string& attributes() const override { return attributes_; }
  int64_t mtime() const override { return mtime_; }

  Status ReadAt(uint64_t offset, std::span<std::byte> dest) const override {
    RangeRead range{key_, offset, dest, {}};
    OC_RETURN_IF_ERROR(CheckRange(range, size_));
    if (dest.empty()) return Status();
    // The version seen at open, or Aborted: never another version's bytes. Named by oc.gen,
    // which an access-time refresh leaves alone (the object version it bumps); by the object
    // version for an object written without one.
    librados::ObjectReadOperation op;
    librados::bufferlist generation;
    if (generation_.empty()) {
      op.assert_version(version_);
    } else {
      generation.append(generation_);
      op.cmpxattr(kGenerationXattr, LIBRADOS_CMPXATTR_OP_EQ, generation);
    }
    librados::bufferlist bl;
    int rval = 0;
    op.read(offset, dest.size(), &bl, &rval);
    const int r = store_->io().operate(key_, &op, nullptr);
    if (r == -ECANCELED)
      return Status(StatusCode::kAborted, Context("reading", key_) + ": the object changed");
    if (r < 0) return RadosError(Context("reading", key_), r);
    if (bl.length() != dest.size()) return InternalError(Context("reading", key_) + ": short");
    CopyOut(bl, dest);
    return Status();
  }

 private:
  RadosStore* store_;
  std::string key_;
  uint64_t version_;
  std::string generation_;
  uint64_t size_;
  time_t mtime_;
  std::string attributes_;
};

Result<std::unique_ptr<ObjectReader>> RadosStore::OpenReader(std::string_view key) {
  uint64_t version = 0;
  OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectRead> read, StatWithAttributes(key, &version));
  std::string attributes;
  if (read->attributes_rval >= 0) {
    attributes.assign(read->attributes.c_str(), read->attributes.length());
  }
  if (capacity_) capacity_->TouchIfStale(std::string(key), read->Generation(), read->AccessTime());
  return std::make_unique<RadosObjectReader>(this, std::string(key), version, read->Generation(),
                                             read->size, read->mtime, std::move(attributes));
}

}  // namespace

bool RadosStoreAvailable() { return true; }

Result<RadosSequentialRead> ReadRadosObjectsSequentially(Store& store,
                                                         std::span<const std::string> names,
                                                         int in_flight) {
  auto* rados = dynamic_cast<RadosStore*>(&store);
  if (rados == nullptr) return InvalidArgumentError("not a RADOS store: " + store.Uri());
  return rados->ReadSequentially(names, in_flight);
}

Result<std::unique_ptr<Store>> OpenRadosStore(const RadosStoreOptions& options) {
  if (options.pool.empty()) return InvalidArgumentError("rados:// store: no pool named");
  if (options.timeout_seconds <= 0) {
    return InvalidArgumentError("rados:// store: timeout must be a positive number of seconds");
  }
  auto cluster = std::make_unique<librados::Rados>();
  int r = cluster->init(options.user.c_str());
  if (r < 0) return RadosError("initialising librados for user " + options.user, r);
  r = cluster->conf_read_file(options.conf_path.empty() ? nullptr : options.conf_path.c_str());
  if (r < 0) {
    return RadosError(
        "reading Ceph configuration " +
            (options.conf_path.empty() ? std::string("(default search)") : options.conf_path),
        r);
  }
  const std::string timeout = std::to_string(options.timeout_seconds);
  for (const char* option :
       {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    cluster->conf_set(option, timeout.c_str());
  }
  // librados logs to stderr by default; the server has its own log.
  cluster->conf_set("log_to_stderr", "false");
  cluster->conf_set("err_to_stderr", "false");
  r = cluster->connect();
  if (r < 0) return RadosError("connecting to the Ceph cluster", r);
  librados::IoCtx io;
  r = cluster->ioctx_create(options.pool.c_str(), io);
  if (r == -ENOENT) {
    cluster->shutdown();
    return NotFoundError("RADOS pool '" + options.pool +
                         "' does not exist (create it: ceph osd pool create " + options.pool + ")");
  }
  if (r < 0) {
    cluster->shutdown();
    return RadosError("opening RADOS pool " + options.pool, r);
  }
  io.set_namespace(options.ns);
  return std::unique_ptr<Store>(
      std::make_unique<RadosStore>(std::move(cluster), std::move(io), options));
}

}  // namespace objectcache
