// Store: the one storage interface, with NVMe key-value semantics.
//
// A store maps names (1 to 1024 bytes, any bytes: S3 object names fit) to immutable byte
// strings. A chunk is stored under its key's 32-digit hex name. The commands are those of the
// NVMe KV command set, batched where the caller would otherwise loop:
//
//   Put       store a whole object atomically: readers see all of the new value or none of it
//   Retrieve  a whole object, or many byte ranges of many objects, into caller memory
//   Exist     presence of a batch of keys, and the length of the present prefix of a list
//   Delete    remove one object
//   List      names by prefix, in byte order, paged
//
// Backends (memory, local directory, RADOS, S3) live under src/store/<backend>/ and are made
// from a URI by OpenStore (store_registry.h). Every backend passes the conformance suite in
// src/store/store_conformance.h.
//
// Thread safety: every method may be called from many threads at once. Calls block the
// calling thread until done (servers call them from a bounded pool, never an I/O thread).
// Spans passed in must stay valid for the duration of the call only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/status.h"

namespace objectcache {

// 1024 bytes of S3 object name under a bucket name of up to 63 bytes and a separator.
inline constexpr size_t kMaxKeyBytes = 1088;
// Attributes: a small opaque blob stored atomically with an object (the S3 layer keeps its
// ETag, content type and user metadata there).
inline constexpr size_t kMaxAttributeBytes = 3072;

// Names that begin with '.' are records: the S3 layer keeps its buckets' descriptions and its
// multipart uploads (records and parts) there. A store that evicts (StoreCapabilities::evicts)
// never evicts a record, whatever its recency; records count in Usage like any object.
inline bool IsRecordName(std::string_view key) { return !key.empty() && key.front() == '.'; }

// InvalidArgument unless 1 <= key.size() <= kMaxKeyBytes.
Status ValidateKey(std::string_view key);

// What a backend can do; callers pick a path by capability, never by type.
struct StoreCapabilities {
  bool ranged_reads = true;  // Retrieve of a byte range costs the range, not the object
  bool persistent = false;   // survives a restart of the process
  bool evicts = false;       // may drop objects (never records) to stay under a capacity bound
  std::optional<uint64_t> capacity_bytes;
  size_t max_key_bytes = kMaxKeyBytes;  // longest name (S3 stores: 1024)
  bool tracks_usage = true;             // Usage() is exact (a remote store may not know it)
  // An open ObjectReader keeps reading its version after the object is replaced or deleted.
  // When false, such reads fail (Aborted or NotFound) instead: never another version's bytes.
  bool pinned_readers = true;
  // Names must be valid UTF-8 (S3 object names); others are refused with InvalidArgument.
  bool utf8_names = false;
  // PutOptions::if_absent and ::if_attributes, and DeleteIf, are honoured atomically (against
  // every writer of the store).
  bool conditional_put = false;
  // Readers can name their bytes' place in a file (ObjectReader::file_extent), so the server
  // may send them by sendfile. When false the server does not look for one.
  bool file_extents = false;
};

struct StoreUsage {
  uint64_t objects = 0;
  uint64_t bytes = 0;      // payload bytes of all objects
  uint64_t evictions = 0;  // objects dropped to make room, since open
};

struct PutOptions {
  // When true, the call returns only once the object would survive power loss (fsync).
  // Otherwise it survives a crash of the process but maybe not of the machine.
  std::optional<bool> durable;
  // Stored and replaced together with the value; at most kMaxAttributeBytes.
  std::string attributes;
  // Create only: when the name exists the put fails with AlreadyExists and changes nothing,
  // atomically with respect to other writers. REQUIRES: Capabilities().conditional_put
  // (otherwise Unimplemented).
  bool if_absent = false;
  // Replace only this version: when the name is absent (NotFound) or its attributes are not
  // exactly these (FailedPrecondition), the put fails and changes nothing, atomically with
  // respect to other writers. The compare-and-swap under S3's If-Match.
  // REQUIRES: Capabilities().conditional_put (otherwise Unimplemented).
  std::optional<std::string> if_attributes;
};

// Streams one object's value into the store. Nothing is visible to readers until Commit
// returns OK; then all of it is, atomically. Destroying a writer without Commit discards it.
// Not thread-safe: one writer, one thread at a time.
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  virtual Status Append(std::span<const std::byte> bytes) = 0;
  // Replaces the attributes given at creation (say, with a digest of the bytes appended).
  virtual Status SetAttributes(std::string attributes) = 0;
  virtual Status Commit() = 0;
  virtual uint64_t bytes_written() const = 0;
};

// One version of one object, pinned at open: reads see that version even if the object is
// replaced or deleted meanwhile. ReadAt may be called from several threads.
class ObjectReader {
 public:
  virtual ~ObjectReader() = default;
  virtual uint64_t size() const = 0;
  virtual const std::string& attributes() const = 0;
  // Modification time of this version, seconds since the epoch.
  virtual int64_t mtime() const = 0;
  // Fills `dest` from `offset`. OutOfRange past the end; DataLoss if the bytes are damaged.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> dest) const = 0;
  // As ReadAt, but only if it can be done without waiting for a device (the bytes are in
  // memory or the page cache); Unavailable otherwise, and then nothing is promised about
  // `dest`. Event loops call this first and hand the read to a thread only when it fails.
  virtual Status ReadAtIfCached(uint64_t offset, std::span<std::byte> dest) const {
    (void)offset;
    (void)dest;
    return UnavailableError("no non-blocking read");
  }
  // Where this version's bytes lie in an open file, for senders that move them to a socket
  // without copying them through user space (sendfile): value byte i is byte base + i of `fd`.
  // Valid while the reader lives. None where the bytes are not in a file (the default).
  struct FileExtent {
    int fd = -1;
    uint64_t base = 0;
  };
  virtual std::optional<FileExtent> file_extent() const { return std::nullopt; }
};

// One byte range of one object, to be read into `dest` (dest.size() bytes from `offset`).
struct RangeRead {
  std::string_view key;
  uint64_t offset = 0;
  std::span<std::byte> dest;
  // Set by RetrieveRanges: OK, NotFound (no such object) or OutOfRange (the range passes the
  // end of the object; dest is then unspecified).
  Status status;
  // Set by RetrieveRangesInPlace when the status is OK: where the bytes are, `dest` or memory
  // of the store's own.
  std::span<const std::byte> data;
};

// Memory a store lent to RetrieveRangesInPlace's caller: its ranges' bytes stay valid until the
// holder lets go of it.
using HeldMemory = std::vector<std::shared_ptr<const void>>;

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

struct ListOptions {
  std::string prefix;
  std::string start_after;  // names strictly greater than this (continuation)
  size_t max_keys = 1000;
};

struct ListPage {
  std::vector<ObjectInfo> objects;  // in byte order of the names
  bool truncated = false;           // more names follow; continue after objects.back().key
};

class Store {
 public:
  virtual ~Store() = default;

  virtual StoreCapabilities Capabilities() const = 0;
  virtual StoreUsage Usage() const = 0;
  // "file:///var/cache/objectcache", for logs and errors.
  virtual std::string Uri() const = 0;

  // Stores `value` under `key`, replacing any previous value atomically. ResourceExhausted when
  // the object cannot fit (larger than the capacity, or the device is full).
  virtual Status Put(std::string_view key, std::span<const std::byte> value,
                     const PutOptions& options = {}) = 0;

  // Size of an object. NotFound when absent.
  virtual Result<ObjectInfo> Stat(std::string_view key) = 0;

  // Reads a whole object into `dest` and returns its size. ResourceExhausted (and `dest`
  // unspecified) when `dest` is smaller than the object; NotFound when absent.
  virtual Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) = 0;

  // Reads many ranges of many objects. Each read gets its own status; the call's Status is
  // not OK only when the store itself failed (then no read's bytes are to be trusted). Reads of
  // one object within one call see one version of it.
  virtual Status RetrieveRanges(std::span<RangeRead> reads) = 0;

  // As RetrieveRanges, for a caller that only reads the bytes: a store that reads into memory
  // of its own (RADOS: librados's receive buffers) may leave a range's bytes there rather than
  // copy them into `dest`, and adds that memory to `held`. `data` of each read whose status is
  // OK says where its bytes are. The default reads into `dest`.
  virtual Status RetrieveRangesInPlace(std::span<RangeRead> reads, HeldMemory* held) {
    (void)held;
    OC_RETURN_IF_ERROR(RetrieveRanges(reads));
    for (RangeRead& r : reads) {
      if (r.status.ok()) r.data = r.dest;
    }
    return Status();
  }

  // Presence of each key, in order. Views, so that a caller naming thousands (a batch lookup)
  // can keep the names in one buffer; the second form is the same for strings.
  virtual Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) = 0;
  Result<std::vector<bool>> Exist(std::span<const std::string> keys);

  // How many leading keys of the ordered list exist (the cached prefix length).
  virtual Result<size_t> CountPresentPrefix(std::span<const std::string> keys);

  // Removes an object. NotFound when absent.
  virtual Status Delete(std::string_view key) = 0;

  // Removes an object only if its attributes are exactly `attributes`, atomically with respect
  // to other writers: NotFound when absent, FailedPrecondition (and nothing removed) when they
  // differ. REQUIRES: Capabilities().conditional_put (otherwise Unimplemented, the default).
  virtual Status DeleteIf(std::string_view key, std::string_view attributes) {
    (void)attributes;
    return UnimplementedError("conditional delete of '" + std::string(key) + "'");
  }

  // Keeps `key` from eviction until `until` (seconds since the epoch): a later time extends a
  // pin, an earlier one changes nothing. NotFound when absent. The default, for stores that
  // never evict, only checks that the object exists.
  virtual Status Pin(std::string_view key, int64_t until) {
    (void)until;
    return Stat(key).status();
  }

  // Names starting with options.prefix and strictly after options.start_after, in byte order,
  // at most options.max_keys of them (truncated when more follow). A page reflects the store
  // at about the time of the call: objects written or deleted meanwhile may or may not be in
  // it, but no name appears twice across pages that follow each other's last key.
  // REQUIRES: options.max_keys > 0 (a page of none says nothing of what follows).
  virtual Result<ListPage> List(const ListOptions& options) = 0;

  // Streaming forms of Put and Retrieve, for values too large to hold in memory.
  virtual Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                          const PutOptions& options = {}) = 0;
  virtual Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) = 0;

  // As OpenReader, but only if that needs no system call that can block (the object is open
  // already, or in memory); Unavailable otherwise. NotFound is reported as usual.
  virtual Result<std::unique_ptr<ObjectReader>> OpenReaderIfCached(std::string_view key) {
    (void)key;
    return UnavailableError("no non-blocking open");
  }
};

// Calls fn(info) for every object whose name starts with `prefix`, in name order, a page at a
// time. Stops at the first failed List.
Status ForEachObject(Store& store, const std::string& prefix,
                     const std::function<void(const ObjectInfo&)>& fn);

// InvalidArgument when attributes exceed kMaxAttributeBytes.
Status ValidateAttributes(std::string_view attributes);

// Reads a whole object into a new buffer (Stat, then Retrieve; retried if the object was
// replaced in between by a larger one). ResourceExhausted, before anything is allocated, for
// an object larger than `max_bytes` (the size a store reports is not trusted further than that:
// an s3:// upstream's Content-Length is the claim of another server).
Result<std::string> ReadWholeObject(Store& store, std::string_view key,
                                    uint64_t max_bytes = UINT64_MAX);

inline std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
inline std::span<std::byte> AsWritableBytes(std::string& s) {
  return std::as_writable_bytes(std::span(s.data(), s.size()));
}

}  // namespace objectcache
