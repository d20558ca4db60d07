#include "store/memory/memory_store.h"

#include "store/backend_util.h"

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

namespace objectcache {
namespace {

using Value = std::shared_ptr<const std::string>;

class MemoryStore final : public Store {
 public:
  StoreCapabilities Capabilities() const override {
    return {.ranged_reads = true, .persistent = false, .evicts = false, .capacity_bytes = {}};
  }

  StoreUsage Usage() const override {
    return {.objects = objects_.load(), .bytes = bytes_.load(), .evictions = 0};
  }

  std::string Uri() const override { return "mem://"; }

  Status Put(std::string_view key, std::span<const std::byte> value, const PutOptions&) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    auto v = std::make_shared<const std::string>(reinterpret_cast<const char*>(value.data()),
                                                 value.size());
    Shard& s = ShardFor(key);
    Value old;
    {
      std::lock_guard lock(s.mu);
      auto [it, inserted] = s.objects.try_emplace(std::string(key));
      old = std::move(it->second);
      it->second = std::move(v);
      if (inserted) objects_++;
    }
    bytes_ += value.size();
    if (old) bytes_ -= old->size();
    return Status();
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    OC_ASSIGN_OR_RETURN(Value v, Find(key));
    return ObjectInfo{std::string(key), v->size()};
  }

  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override {
    OC_ASSIGN_OR_RETURN(Value v, Find(key));
    if (dest.size() < v->size()) {
      return ResourceExhaustedError("reading '" + std::string(key) + "': object is " +
                                    std::to_string(v->size()) + " bytes, buffer " +
                                    std::to_string(dest.size()));
    }
    std::memcpy(dest.data(), v->data(), v->size());
    return v->size();
  }

  Status RetrieveRanges(std::span<RangeRead> reads) override {
    ServeRangeReads(
        reads, [this](std::string_view key) { return Find(key); },
        [](const Value& v) { return v->size(); },
        [](const Value& v, RangeRead& r) {
          std::memcpy(r.dest.data(), v->data() + r.offset, r.dest.size());
          return Status();
        });
    return Status();
  }

  Result<std::vector<bool>> Exist(std::span<const std::string> keys) override {
    std::vector<bool> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      Shard& s = ShardFor(keys[i]);
      std::lock_guard lock(s.mu);
      out[i] = s.objects.contains(keys[i]);
    }
    return out;
  }

  Status Delete(std::string_view key) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    Shard& s = ShardFor(key);
    Value old;
    {
      std::lock_guard lock(s.mu);
      auto it = s.objects.find(key);
      if (it == s.objects.end()) {
        return NotFoundError("deleting '" + std::string(key) + "': no such object");
      }
      old = std::move(it->second);
      s.objects.erase(it);
    }
    objects_--;
    bytes_ -= old->size();
    return Status();
  }

  Result<ListPage> List(const ListOptions& options) override {
    std::vector<ObjectInfo> candidates;
    for (Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      CollectListCandidates(
          s.objects, options, [](const Value& v) { return v->size(); }, &candidates);
    }
    return FinishListPage(std::move(candidates), options.max_keys);
  }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    std::map<std::string, Value, std::less<>> objects;
  };

  Shard& ShardFor(std::string_view key) {
    return shards_[std::hash<std::string_view>()(key) % kShards];
  }

  Result<Value> Find(std::string_view key) {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    Shard& s = ShardFor(key);
    std::lock_guard lock(s.mu);
    auto it = s.objects.find(key);
    if (it == s.objects.end()) {
      return NotFoundError("reading '" + std::string(key) + "': no such object");
    }
    return it->second;
  }

  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> objects_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace objectcache
