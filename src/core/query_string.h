// Splitting URL query strings ("a=1&b=2&flag") into their pairs, still encoded.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// ForEachQueryPair for options that mean one thing each (a store URI's): InvalidArgument
// naming `what` for a name given twice, as "capacity=1GiB&capacity=5GiB", before calling `on`.
template <typename F>
Status ForEachQueryOption(std::string_view query, std::string_view what, F on) {
  std::vector<std::string_view> names;
  OC_RETURN_IF_ERROR(
      ForEachQueryPair(query, [&](std::string_view name, std::optional<std::string_view>) {
        if (std::ranges::find(names, name) != names.end()) {
          return InvalidArgumentError(std::string(what) + " option '" + std::string(name) +
                                      "' is given twice");
        }
        names.push_back(name);
        return Status();
      }));
  return ForEachQueryPair(query, std::move(on));
}

}  // namespace objectcache
