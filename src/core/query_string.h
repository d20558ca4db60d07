// Splitting URL query strings ("a=1&b=2&flag") into their pairs, still encoded.
#pragma once

#include <optional>
#include <string_view>

#include "objectcache/status.h"

namespace objectcache {

// Calls on(name, value) for each non-empty '&'-separated pair, value unset when there is no
// '='. Stops at, and returns, the first error `on` returns.
template <typename F>
Status ForEachQueryPair(std::string_view query, F on) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::optional<std::string_view> value;
    if (eq != std::string_view::npos) value = pair.substr(eq + 1);
    OC_RETURN_IF_ERROR(on(pair.substr(0, eq), value));
  }
  return Status();
}

}  // namespace objectcache
