// Process log: one line per event on stderr, with time and level; as text (control bytes of the
// message written as \xNN), or as one JSON object a line ({"time": "2026-12-01T05:37:02.123Z",
// "level": "info", "msg": "..."}) for log collectors. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "objectcache/status.h"

namespace objectcache::server {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn", "error"; InvalidArgument for any other.
Result<LogLevel> ParseLogLevel(std::string_view name);
void SetLogLevel(LogLevel level);

enum class LogFormat { kText, kJson };
// "text", "json"; InvalidArgument for any other.
Result<LogFormat> ParseLogFormat(std::string_view name);
void SetLogFormat(LogFormat format);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, std::string_view message);

inline void LogDebug(std::string_view m) { Log(LogLevel::kDebug, m); }
inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarn(std::string_view m) { Log(LogLevel::kWarn, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

}  // namespace objectcache::server
