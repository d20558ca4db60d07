#include "core/bounded_read.h"

#include <algorithm>
#include <cerrno>

namespace objectcache {

Result<std::string> ReadBounded(std::istream& in, uint64_t max_bytes, const std::string& name) {
  constexpr uint64_t kPiece = 1 << 20;
  std::string text;
  while (in && text.size() <= max_bytes) {
    const uint64_t left = max_bytes - text.size();  // one more than this ends the read
    const size_t want = static_cast<size_t>(left < kPiece ? left + 1 : kPiece);
    const size_t had = text.size();
    text.resize(had + want);
    in.read(text.data() + had, static_cast<std::streamsize>(want));
    text.resize(had + static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return ErrnoError("reading " + name, errno);
  if (text.size() > max_bytes) {
    return InvalidArgumentError(name + " is over " + std::to_string(max_bytes) + " bytes");
  }
  return text;
}

}  // namespace objectcache
