// The names of an enumeration's values, written once: a table of {value, name} rows gives the
// name of a value, the value of a name, and, when a name matches none, an error that lists them
// all. A table lists the values in their order with no gap (ListsEveryValueInOrder, to
// static_assert beside it). Unlike a switch, a table does not make the compiler name an
// enumerator it misses: one added after the last row is named `unknown` and cannot be parsed,
// so an enumeration's table stays next to the functions that name it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "objectcache/status.h"

namespace objectcache {

template <typename E>
struct NamedValue {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
constexpr bool ListsEveryValueInOrder(const NamedValue<E> (&table)[N], size_t first = 0) {
  for (size_t i = 0; i < N; ++i) {
    if (static_cast<size_t>(table[i].value) != first + i) return false;
  }
  return true;
}

// The name of `value`; `unknown` for a value that is not in the table (a cast integer).
template <typename E, size_t N>
constexpr std::string_view NameIn(const NamedValue<E> (&table)[N], E value,
                                  std::string_view unknown = "?") {
  for (const NamedValue<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return unknown;
}

// "a, b or c": the table's names, for help texts and errors.
template <typename E, size_t N>
std::string NameList(const NamedValue<E> (&table)[N]) {
  std::string list;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) list += i + 1 == N ? " or " : ", ";
    list += table[i].name;
  }
  return list;
}

// The value named `name`; InvalidArgument "unknown WHAT 'NAME' (a, b or c)" for any other.
template <typename E, size_t N>
Result<E> ParseNameIn(const NamedValue<E> (&table)[N], std::string_view name,
                      std::string_view what) {
  for (const NamedValue<E>& row : table) {
    if (row.name == name) return row.value;
  }
  return InvalidArgumentError("unknown " + std::string(what) + " '" + std::string(name) + "' (" +
                              NameList(table) + ")");
}

}  // namespace objectcache
