// ForwardingStore: a Store that hands every call to another one. A store that changes one
// behaviour of another and keeps the rest derives from it: the quota store (its writes), and
// tests' stores (a failing commit, a slow read).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "objectcache/store.h"

namespace objectcache {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::unique_ptr<Store> base) : base_(std::move(base)) {}

  StoreCapabilities Capabilities() const override { return base_->Capabilities(); }
  StoreUsage Usage() const override { return base_->Usage(); }
  std::string Uri() const override { return base_->Uri(); }
  Status Put(std::string_view k, std::span<const std::byte> v, const PutOptions& o = {}) override {
    return base_->Put(k, v, o);
  }
  Result<ObjectInfo> Stat(std::string_view k) override { return base_->Stat(k); }
  Result<size_t> Retrieve(std::string_view k, std::span<std::byte> d) override {
    return base_->Retrieve(k, d);
  }
  Status RetrieveRanges(std::span<RangeRead> r) override { return base_->RetrieveRanges(r); }
  // RetrieveRangesInPlace is not forwarded: its default calls RetrieveRanges above, so a store
  // that changes reads (tests' slow store) changes those too. One that leaves reads alone
  // forwards it itself (the quota store).
  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> k) override {
    return base_->Exist(k);
  }
  Result<size_t> CountPresentPrefix(std::span<const std::string> k) override {
    return base_->CountPresentPrefix(k);
  }
  Status Delete(std::string_view k) override { return base_->Delete(k); }
  Status DeleteIf(std::string_view k, std::string_view a) override { return base_->DeleteIf(k, a); }
  Status Pin(std::string_view k, int64_t until) override { return base_->Pin(k, until); }
  Result<ListPage> List(const ListOptions& o) override { return base_->List(o); }
  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view k,
                                                  const PutOptions& o = {}) override {
    return base_->NewWriter(k, o);
  }
  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view k) override {
    return base_->OpenReader(k);
  }
  Result<std::unique_ptr<ObjectReader>> OpenReaderIfCached(std::string_view k) override {
    return base_->OpenReaderIfCached(k);
  }

 protected:
  Store& base() { return *base_; }

 private:
  std::unique_ptr<Store> base_;
};

}  // namespace objectcache
