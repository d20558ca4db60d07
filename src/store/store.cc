#include "objectcache/store.h"

#include "store/backend_util.h"

#include <algorithm>
#include <cstring>

namespace objectcache {

Status ValidateKey(std::string_view key) {
  if (key.empty()) return InvalidArgumentError("empty object name");
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("object name of " + std::to_string(key.size()) +
                                " bytes exceeds the limit of " + std::to_string(kMaxKeyBytes));
  }
  return Status();
}

Status ValidateAttributes(std::string_view attributes) {
  if (attributes.size() > kMaxAttributeBytes) {
    return InvalidArgumentError("object attributes of " + std::to_string(attributes.size()) +
                                " bytes exceed the limit of " + std::to_string(kMaxAttributeBytes));
  }
  return Status();
}

Result<std::vector<bool>> Store::Exist(std::span<const std::string> keys) {
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  return Exist(std::span<const std::string_view>(views));
}

Result<size_t> Store::CountPresentPrefix(std::span<const std::string> keys) {
  OC_ASSIGN_OR_RETURN(std::vector<bool> present, Exist(keys));
  size_t n = 0;
  while (n < present.size() && present[n]) ++n;
  return n;
}

Status ForEachObject(Store& store, const std::string& prefix,
                     const std::function<void(const ObjectInfo&)>& fn) {
  ListOptions o{.prefix = prefix, .start_after = "", .max_keys = 1000};
  for (;;) {
    OC_ASSIGN_OR_RETURN(ListPage page, store.List(o));
    for (const ObjectInfo& info : page.objects) fn(info);
    if (!page.truncated || page.objects.empty()) return Status();
    o.start_after = page.objects.back().key;
  }
}

Result<std::string> ReadWholeObject(Store& store, std::string_view key, uint64_t max_bytes) {
  const uint64_t most = std::min<uint64_t>(max_bytes, std::string().max_size());
  for (int attempt = 0; attempt < 8; ++attempt) {
    OC_ASSIGN_OR_RETURN(ObjectInfo info, store.Stat(key));
    if (info.size > most) {
      return ResourceExhaustedError("reading '" + std::string(key) + "': an object of " +
                                    std::to_string(info.size) + " bytes, over the " +
                                    std::to_string(most) + " this reader holds");
    }
    std::string buf(info.size, '\0');
    Result<size_t> n = store.Retrieve(key, AsWritableBytes(buf));
    if (n.has_value()) {
      buf.resize(*n);
      return buf;
    }
    // Replaced by a larger object between Stat and Retrieve: try again.
    if (n.error().code() != StatusCode::kResourceExhausted) return n.error();
  }
  return UnavailableError("reading '" + std::string(key) + "': object keeps changing size");
}

Status CheckRange(const RangeRead& r, uint64_t object_size) {
  if (r.offset > object_size || r.dest.size() > object_size - r.offset) {
    return OutOfRangeError("reading '" + std::string(r.key) + "': range " +
                           std::to_string(r.offset) + "+" + std::to_string(r.dest.size()) +
                           " passes the end of a " + std::to_string(object_size) + "-byte object");
  }
  return Status();
}

namespace {

class BufferedObjectWriter final : public ObjectWriter {
 public:
  BufferedObjectWriter(Store* store, std::string key, PutOptions options, uint64_t max_bytes)
      : store_(store), key_(std::move(key)), options_(std::move(options)), max_bytes_(max_bytes) {}
  Status Append(std::span<const std::byte> bytes) override {
    if (bytes.size() > max_bytes_ - data_.size()) {
      return ResourceExhaustedError("writing '" + key_ + "': more than the " +
                                    std::to_string(max_bytes_) + " bytes " + store_->Uri() +
                                    " keeps in one object");
    }
    data_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status();
  }
  Status SetAttributes(std::string attributes) override {
    OC_RETURN_IF_ERROR(ValidateAttributes(attributes));
    options_.attributes = std::move(attributes);
    return Status();
  }
  Status Commit() override { return store_->Put(key_, AsBytes(data_), options_); }
  uint64_t bytes_written() const override { return data_.size(); }

 private:
  Store* store_;
  std::string key_;
  PutOptions options_;
  uint64_t max_bytes_;
  std::string data_;
};

}  // namespace

std::unique_ptr<ObjectWriter> NewBufferedWriter(Store* store, std::string key, PutOptions options,
                                                uint64_t max_bytes) {
  return std::make_unique<BufferedObjectWriter>(store, std::move(key), std::move(options),
                                                max_bytes);
}

ListPage FinishListPage(std::vector<ObjectInfo> candidates, size_t max_keys) {
  std::sort(candidates.begin(), candidates.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  ListPage page;
  page.truncated = candidates.size() > max_keys;
  if (page.truncated) candidates.resize(max_keys);
  page.objects = std::move(candidates);
  return page;
}

}  // namespace objectcache
