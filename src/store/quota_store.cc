#include "store/quota_store.h"

#include <mutex>

namespace objectcache {
namespace {

class QuotaStoreImpl;

// Streams into the inner writer; the quota is checked when the size is known, at Commit, and
// an object that outgrows the whole quota is refused on the append that makes it do so (it
// could never commit), so an upload in flight holds at most the quota on disk.
class QuotaWriter final : public ObjectWriter {
 public:
  QuotaWriter(QuotaStoreImpl* store, std::string key, std::unique_ptr<ObjectWriter> inner)
      : store_(store), key_(std::move(key)), inner_(std::move(inner)) {}
  Status Append(std::span<const std::byte> bytes) override;
  Status SetAttributes(std::string attributes) override {
    return inner_->SetAttributes(std::move(attributes));
  }
  Status Commit() override;
  uint64_t bytes_written() const override { return inner_->bytes_written(); }

 private:
  QuotaStoreImpl* store_;
  const std::string key_;
  std::unique_ptr<ObjectWriter> inner_;
};

class QuotaStoreImpl final : public QuotaStore {
 public:
  QuotaStoreImpl(std::unique_ptr<Store> inner, uint64_t quota_bytes)
      : QuotaStore(std::move(inner)), quota_(quota_bytes) {}

  void SetQuota(uint64_t quota_bytes) override { quota_ = quota_bytes; }
  uint64_t quota() const override { return quota_; }
  uint64_t rejections() const override { return rejections_; }

  // Writes are checked; everything else is the inner store's.
  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& options) override {
    return Committed(key, value.size(), [&] { return base().Put(key, value, options); });
  }
  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& options) override {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectWriter> w, base().NewWriter(key, options));
    return std::unique_ptr<ObjectWriter>(new QuotaWriter(this, std::string(key), std::move(w)));
  }

  // Runs `commit` (which makes `bytes` bytes under `key` visible) if the footprint after it
  // stays within the quota; QuotaExceeded otherwise. An object's footprint is its payload and a
  // block (kObjectFootprintBytes: the file system's block, index entry and header it costs), so
  // a quota bounds what the tenant holds on disk, empty objects included.
  template <typename F>
  Status Committed(std::string_view key, uint64_t bytes, F commit) {
    std::lock_guard lock(commit_mu_);
    const StoreUsage usage = base().Usage();
    const uint64_t used = Footprint(usage.bytes, usage.objects);
    const uint64_t quota = quota_;
    const uint64_t adds = Footprint(bytes, 1);
    if (adds > quota || used > quota - adds) {
      // Over, unless the object replaces one at least this much of it.
      Result<ObjectInfo> old = base().Stat(key);
      const uint64_t freed = old.has_value() ? Footprint(old->size, 1) : 0;
      const uint64_t after = used - std::min(used, freed);
      if (adds > quota || after > quota - adds) {
        rejections_++;
        return ResourceExhaustedError(std::string(kQuotaExceeded) + ": writing " +
                                      std::to_string(bytes) + " bytes to '" + std::string(key) +
                                      "' would take the tenant's " + std::to_string(used) +
                                      " bytes on disk past its quota of " + std::to_string(quota))
            .WithReason(StatusReason::kQuotaExceeded);
      }
    }
    return commit();
  }

  // Payload plus a block an object, saturating at u64 max.
  static uint64_t Footprint(uint64_t bytes, uint64_t objects) {
    uint64_t blocks = 0, total = 0;
    if (__builtin_mul_overflow(objects, kObjectFootprintBytes, &blocks) ||
        __builtin_add_overflow(bytes, blocks, &total)) {
      return UINT64_MAX;
    }
    return total;
  }

 private:
  std::atomic<uint64_t> quota_;
  std::atomic<uint64_t> rejections_{0};
  std::mutex commit_mu_;  // a commit and the check before it, one at a time
};

Status QuotaWriter::Append(std::span<const std::byte> bytes) {
  const uint64_t quota = store_->quota();
  const uint64_t written = inner_->bytes_written() + kObjectFootprintBytes;
  if (written > quota || bytes.size() > quota - written) {
    return ResourceExhaustedError(std::string(kQuotaExceeded) + ": '" + key_ +
                                  "' grows past the tenant's whole quota of " +
                                  std::to_string(quota) + " bytes")
        .WithReason(StatusReason::kQuotaExceeded);
  }
  return inner_->Append(bytes);
}

Status QuotaWriter::Commit() {
  return store_->Committed(key_, inner_->bytes_written(), [&] { return inner_->Commit(); });
}

}  // namespace

Result<std::unique_ptr<QuotaStore>> NewQuotaStore(std::unique_ptr<Store> inner,
                                                  uint64_t quota_bytes) {
  if (!inner->Capabilities().tracks_usage) {
    return InvalidArgumentError("a quota needs a store that tracks its usage; " + inner->Uri() +
                                " does not");
  }
  return std::unique_ptr<QuotaStore>(new QuotaStoreImpl(std::move(inner), quota_bytes));
}

}  // namespace objectcache
