// Reading a whole file or stream into memory up to a bound.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "objectcache/status.h"

namespace objectcache {

// All of `in`, if it holds at most `max_bytes`. Reads at most one byte past the bound, so that a
// larger input (a disk image named by mistake, /dev/zero) is refused, not loaded:
// InvalidArgument "NAME is over MAX bytes". A failed read is the errno error "reading NAME".
Result<std::string> ReadBounded(std::istream& in, uint64_t max_bytes, const std::string& name);

}  // namespace objectcache
