// A store that holds one tenant to a byte quota (docs/tenants.md).
//
// A write that would take the inner store's footprint (payload bytes plus kObjectFootprintBytes
// an object) past the quota fails and changes nothing: ResourceExhausted with
// StatusReason::kQuotaExceeded (its message starts with kQuotaExceeded), which the S3 server
// answers 403 QuotaExceeded. The check and the commit happen under one lock, so writers through
// one QuotaStore never pass the quota together; writers through other gateways over the same
// namespace can, by at most the object each has in flight. Replacing an object counts only
// the growth. Reads, deletes and listings pass straight through.
// REQUIRES: the inner store tracks its usage (Capabilities().tracks_usage).
#pragma once

#include <atomic>
#include <memory>
#include <string_view>

#include "objectcache/store.h"
#include "store/forwarding_store.h"

namespace objectcache {

inline constexpr std::string_view kQuotaExceeded = "QuotaExceeded";
// What an object costs against a quota beyond its payload: a block of the file system (and the
// index entry and header it stands for), so that empty objects are not free.
inline constexpr uint64_t kObjectFootprintBytes = 4096;

class QuotaStore;

// InvalidArgument when `inner` does not track its usage.
Result<std::unique_ptr<QuotaStore>> NewQuotaStore(std::unique_ptr<Store> inner,
                                                  uint64_t quota_bytes);

class QuotaStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Status RetrieveRangesInPlace(std::span<RangeRead> r, HeldMemory* held) override {
    return base().RetrieveRangesInPlace(r, held);
  }
  // The quota from now on (a reload); writes already committed stay.
  virtual void SetQuota(uint64_t quota_bytes) = 0;
  virtual uint64_t quota() const = 0;
  // Writes refused for the quota since open.
  virtual uint64_t rejections() const = 0;
};

}  // namespace objectcache
