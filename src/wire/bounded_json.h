// JSON request bodies parsed within bounds: a first pass (SAX, nothing stored) counts nesting
// and values and refuses a document past either bound before any tree is built, so a hostile
// body (a 9 MB nest of arrays, millions of tiny values) costs no memory beyond itself.
//
// Thread-safe: no state.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace objectcache::wire {

struct JsonBounds {
  size_t max_depth = 8;        // nesting of arrays and objects
  size_t max_values = 100000;  // scalars, arrays, objects and keys together
};

// The parsed document, or a discarded value (is_discarded()) when the text is not JSON or
// passes a bound; `why`, if given, then says which.
nlohmann::json ParseBoundedJson(std::string_view text, const JsonBounds& bounds,
                                std::string* why = nullptr);

}  // namespace objectcache::wire
