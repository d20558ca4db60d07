// rados:// URIs, parsed whether or not this build has librados.
#include <charconv>

#include "core/query_string.h"
#include "objectcache/store_registry.h"
#include "store/rados/rados_store.h"

namespace objectcache {

Result<std::unique_ptr<Store>> OpenRadosUri(std::string_view uri) {
  constexpr std::string_view kScheme = "rados://";
  if (!uri.starts_with(kScheme)) return InvalidArgumentError("not a rados:// URI");
  std::string_view rest = uri.substr(kScheme.size());
  const size_t q = rest.find('?');
  RadosStoreOptions options;
  options.pool = std::string(rest.substr(0, q));
  if (options.pool.empty() || options.pool.find('/') != std::string::npos) {
    return InvalidArgumentError("rados:// store URI needs a pool name: rados://POOL?conf=PATH");
  }
  if (q != std::string_view::npos) {
    OC_RETURN_IF_ERROR(ForEachQueryOption(
        rest.substr(q + 1), "rados:// store",
        [&](std::string_view k, std::optional<std::string_view> value) -> Status {
          if (!value || value->empty()) {
            return InvalidArgumentError("rados:// store option '" + std::string(k) +
                                        "' lacks a value");
          }
          const std::string v(*value);
          if (k == "conf") {
            options.conf_path = v;
          } else if (k == "namespace") {
            options.ns = v;
          } else if (k == "id") {
            options.user = v;
          } else if (k == "timeout") {
            auto [end, ec] =
                std::from_chars(v.data(), v.data() + v.size(), options.timeout_seconds);
            if (ec != std::errc() || end != v.data() + v.size() || options.timeout_seconds <= 0) {
              return InvalidArgumentError("rados:// store option timeout=" + v +
                                          " is not a positive number of seconds");
            }
          } else if (k == "capacity") {
            OC_ASSIGN_OR_RETURN(options.capacity_bytes, ParseStoreCapacity(v));
          } else if (k == "atime_resolution" || k == "evict_interval_ms") {
            int64_t n = 0;
            auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec != std::errc() || end != v.data() + v.size() || n <= 0 || n > 86400000) {
              return InvalidArgumentError("rados:// store option " + std::string(k) + "=" + v +
                                          " is not a positive number");
            }
            if (k == "atime_resolution") {
              options.atime_resolution_s = n;
            } else {
              options.evict_interval_ms = static_cast<int>(n);
            }
          } else {
            return InvalidArgumentError(
                "unknown rados:// store option '" + std::string(k) +
                "' (known: conf, namespace, id, timeout, capacity, atime_resolution, "
                "evict_interval_ms)");
          }
          return Status();
        }));
  }
  return OpenRadosStore(options);
}

}  // namespace objectcache
