#include "store/memory/memory_store.h"

#include "store/backend_util.h"

#include <array>
#include <atomic>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>

namespace objectcache {
namespace {

struct Object {
  std::string data;
  std::string attributes;
  int64_t mtime = 0;
};
using Value = std::shared_ptr<const Object>;

class MemoryObjectReader final : public ObjectReader {
 public:
  explicit MemoryObjectReader(Value v) : v_(std::move(v)) {}
  uint64_t size() const override { return v_->data.size(); }
  const std::string& attributes() const override { return v_->attributes; }
  int64_t mtime() const override { return v_->mtime; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dest) const override {
    OC_RETURN_IF_ERROR(CheckRange(RangeRead{.key = "", .offset = offset, .dest = dest}, size()));
    std::memcpy(dest.data(), v_->data.data() + offset, dest.size());
    return Status();
  }
  Status ReadAtIfCached(uint64_t offset, std::span<std::byte> dest) const override {
    return ReadAt(offset, dest);
  }

 private:
  Value v_;
};

class MemoryStore final : public Store {
 public:
  StoreCapabilities Capabilities() const override {
    return {.ranged_reads = true,
            .persistent = false,
            .evicts = false,
            .capacity_bytes = {},
            .conditional_put = true};
  }

  StoreUsage Usage() const override {
    return {.objects = objects_.load(), .bytes = bytes_.load(), .evictions = 0};
  }

  std::string Uri() const override { return "mem://"; }

  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& options) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
    auto v = std::make_shared<const Object>(
        Object{std::string(reinterpret_cast<const char*>(value.data()), value.size()),
               options.attributes, static_cast<int64_t>(::time(nullptr))});
    Shard& s = ShardFor(key);
    Value old;
    {
      std::lock_guard lock(s.mu);
      if (options.if_attributes) {
        auto it = s.objects.find(key);
        if (it == s.objects.end()) {
          return NotFoundError("storing '" + std::string(key) + "': no such object");
        }
        if (it->second->attributes != *options.if_attributes) {
          return FailedPreconditionError("storing '" + std::string(key) +
                                         "': the object was replaced");
        }
      }
      auto [it, inserted] = s.objects.try_emplace(std::string(key));
      if (!inserted && options.if_absent) {
        return AlreadyExistsError("storing '" + std::string(key) + "': the name exists");
      }
      old = std::move(it->second);
      it->second = std::move(v);
      if (inserted) objects_++;
    }
    bytes_ += value.size();
    if (old) bytes_ -= old->data.size();
    return Status();
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    OC_ASSIGN_OR_RETURN(Value v, Find(key));
    return ObjectInfo{std::string(key), v->data.size()};
  }

  Result<size_t> Retrieve(std::string_view key, std::span<std::byte> dest) override {
    OC_ASSIGN_OR_RETURN(Value v, Find(key));
    const std::string& data = v->data;
    if (dest.size() < data.size()) {
      return ResourceExhaustedError("reading '" + std::string(key) + "': object is " +
                                    std::to_string(data.size()) + " bytes, buffer " +
                                    std::to_string(dest.size()));
    }
    std::memcpy(dest.data(), data.data(), data.size());
    return data.size();
  }

  Status RetrieveRanges(std::span<RangeRead> reads) override {
    ServeRangeReads(
        reads, [this](std::string_view key) { return Find(key); },
        [](const Value& v) { return v->data.size(); },
        [](const Value& v, RangeRead& r) {
          std::memcpy(r.dest.data(), v->data.data() + r.offset, r.dest.size());
          return Status();
        });
    return Status();
  }

  using Store::Exist;
  Result<std::vector<bool>> Exist(std::span<const std::string_view> keys) override {
    std::vector<bool> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      Shard& s = ShardFor(keys[i]);
      std::lock_guard lock(s.mu);
      out[i] = s.objects.contains(keys[i]);
    }
    return out;
  }

  Status Delete(std::string_view key) override { return DeleteMatching(key, std::nullopt); }

  Status DeleteIf(std::string_view key, std::string_view attributes) override {
    return DeleteMatching(key, attributes);
  }

  Result<ListPage> List(const ListOptions& options) override {
    std::vector<ObjectInfo> candidates;
    for (Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      CollectListCandidates(
          s.objects, options, [](const Value& v) { return v->data.size(); }, &candidates);
    }
    return FinishListPage(std::move(candidates), options.max_keys);
  }

  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view key,
                                                  const PutOptions& options) override {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    OC_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
    return NewBufferedWriter(this, std::string(key), options);
  }

  Result<std::unique_ptr<ObjectReader>> OpenReader(std::string_view key) override {
    OC_ASSIGN_OR_RETURN(Value v, Find(key));
    return std::unique_ptr<ObjectReader>(new MemoryObjectReader(std::move(v)));
  }
  Result<std::unique_ptr<ObjectReader>> OpenReaderIfCached(std::string_view key) override {
    return OpenReader(key);
  }

 private:
  static constexpr size_t kShards = 16;

  // Delete, or DeleteIf when `attributes` is set.
  Status DeleteMatching(std::string_view key, std::optional<std::string_view> attributes) {
    OC_RETURN_IF_ERROR(ValidateKey(key));
    Shard& s = ShardFor(key);
    Value old;
    {
      std::lock_guard lock(s.mu);
      auto it = s.objects.find(key);
      if (it == s.objects.end()) {
        return NotFoundError("deleting '" + std::string(key) + "': no such object");
      }
      if (attributes && it->second->attributes != *attributes) {
        return FailedPreconditionError("deleting '" + std::string(key) +
                                       "': the object was replaced");
      }
      old = std::move(it->second);
      s.objects.erase(it);
    }
    objects_--;
    bytes_ -= old->data.size();
    return Status();
  }

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
