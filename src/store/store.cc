#include "objectcache/store.h"

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

Result<size_t> Store::CountPresentPrefix(std::span<const std::string> keys) {
  OC_ASSIGN_OR_RETURN(std::vector<bool> present, Exist(keys));
  size_t n = 0;
  while (n < present.size() && present[n]) ++n;
  return n;
}

Result<std::string> ReadWholeObject(Store& store, std::string_view key) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    OC_ASSIGN_OR_RETURN(ObjectInfo info, store.Stat(key));
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

}  // namespace objectcache
