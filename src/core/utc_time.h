// Time stamps in UTC, formatted by strftime(3).
#pragma once

#include <time.h>

#include <ctime>
#include <string>

namespace objectcache {

// `t` in UTC as `format` writes it ("%Y%m%dT%H%M%SZ"); at most 63 characters.
inline std::string FormatUtc(std::time_t t, const char* format) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof(buf), format, &tm);
  return std::string(buf, n);
}

}  // namespace objectcache
