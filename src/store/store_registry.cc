#include "objectcache/store_registry.h"

#include <cctype>
#include <charconv>
#include <map>
#include <mutex>

#include "core/query_string.h"
#include "store/local/local_store.h"
#include "store/memory/memory_store.h"
#include "store/rados/rados_store.h"

namespace objectcache {
namespace {

Result<bool> ParseBool(std::string_view name, std::string_view v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return InvalidArgumentError("store URI option " + std::string(name) + "=" + std::string(v) +
                              " is not true or false");
}

Result<std::unique_ptr<Store>> OpenFileUri(std::string_view rest, const StoreContext& context) {
  size_t q = rest.find('?');
  LocalStoreOptions options;
  options.shared_capacity = context.shared_capacity;
  options.root = std::string(rest.substr(0, q));
  if (options.root.empty()) return InvalidArgumentError("file:// store URI lacks a path");
  if (q != std::string_view::npos) {
    OC_RETURN_IF_ERROR(ForEachQueryOption(
        rest.substr(q + 1), "file:// store",
        [&](std::string_view k, std::optional<std::string_view> value) -> Status {
          if (!value) {
            return InvalidArgumentError("store URI option '" + std::string(k) + "' lacks a value");
          }
          const std::string_view v = *value;
          if (k == "capacity") {
            OC_ASSIGN_OR_RETURN(options.capacity_bytes, ParseStoreCapacity(v));
          } else if (k == "open_files") {
            OC_ASSIGN_OR_RETURN(uint64_t n, ParseByteSize(v));
            options.max_open_files = n;
          } else if (k == "durable") {
            OC_ASSIGN_OR_RETURN(options.durable, ParseBool(k, v));
          } else {
            return InvalidArgumentError("unknown file:// store option '" + std::string(k) +
                                        "' (known: capacity, durable, open_files)");
          }
          return Status();
        }));
  }
  return OpenLocalStore(options);
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, text.data() + text.size() - end);
  if (ec != std::errc() || end == text.data()) {
    return InvalidArgumentError("'" + std::string(text) + "' is not a byte size (e.g. 10GiB)");
  }
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"B", 1},
                                    {"K", 1000},
                                    {"KB", 1000},
                                    {"M", 1000000},
                                    {"MB", 1000000},
                                    {"G", 1000000000},
                                    {"GB", 1000000000},
                                    {"T", 1000000000000},
                                    {"TB", 1000000000000},
                                    {"KiB", 1ull << 10},
                                    {"MiB", 1ull << 20},
                                    {"GiB", 1ull << 30},
                                    {"TiB", 1ull << 40}};
  for (const Unit& u : kUnits) {
    if (u.name == unit) {
      if (value > UINT64_MAX / u.factor) {
        return InvalidArgumentError("byte size '" + std::string(text) + "' is too large");
      }
      return value * u.factor;
    }
  }
  return InvalidArgumentError("'" + std::string(text) + "': unknown size unit '" +
                              std::string(unit) + "'");
}

Result<uint64_t> ParseStoreCapacity(std::string_view text) {
  OC_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(text));
  if (bytes == 0) {
    return InvalidArgumentError(
        "a store capacity of 0 holds nothing: give a size, or no capacity "
        "for a store without a bound");
  }
  return bytes;
}

namespace {
std::mutex g_schemes_mu;
std::map<std::string, StoreOpener>& Schemes() {
  static std::map<std::string, StoreOpener> schemes;
  return schemes;
}
}  // namespace

void RegisterStoreScheme(const std::string& scheme, StoreOpener open) {
  std::lock_guard lock(g_schemes_mu);
  Schemes()[scheme] = std::move(open);
}

Result<std::unique_ptr<Store>> OpenStore(std::string_view uri, const StoreContext& context) {
  if (uri.empty()) return InvalidArgumentError("empty store URI");
  const bool mem = uri == "mem://" || uri == "mem:";
  if (!mem && uri.starts_with("mem:")) {
    return InvalidArgumentError("'" + std::string(uri) +
                                "': mem:// takes no path or options (a memory store has no "
                                "capacity: it cannot evict; file:// and rados:// stores can)");
  }
  const size_t colon = mem ? 0 : uri.find("://");
  if (uri.starts_with("file://")) return OpenFileUri(uri.substr(7), context);
  if (colon == std::string_view::npos) return OpenFileUri(uri, context);  // a bare path
  if (context.shared_capacity) {
    return InvalidArgumentError("a shared capacity is for local stores, not " + std::string(uri));
  }
  if (mem) return NewMemoryStore();
  if (uri.starts_with("rados://")) return OpenRadosUri(uri);
  StoreOpener open;
  {
    std::lock_guard lock(g_schemes_mu);
    auto it = Schemes().find(std::string(uri.substr(0, colon)));
    if (it != Schemes().end()) open = it->second;
  }
  if (open) return open(uri);
  return InvalidArgumentError("unknown store URI scheme '" + std::string(uri.substr(0, colon)) +
                              "://' (known: mem://, file://, rados://)");
}

}  // namespace objectcache
