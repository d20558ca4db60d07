#include "server/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include "core/hex.h"
#include "core/name_table.h"
#include "core/utc_time.h"
#include "s3/s3_request.h"

namespace objectcache::server {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<bool> g_json{false};
std::mutex g_mu;

// As --log-level takes them and a JSON line writes them; a text line writes them in capitals.
constexpr NamedValue<LogLevel> kLevelNames[] = {{LogLevel::kDebug, "debug"},
                                                {LogLevel::kInfo, "info"},
                                                {LogLevel::kWarn, "warn"},
                                                {LogLevel::kError, "error"}};
static_assert(ListsEveryValueInOrder(kLevelNames));

// `text` as a JSON string's contents: quotes, backslashes and control characters escaped, and
// every byte above 0x7f too when the text is not valid UTF-8 (a client's name can be anything),
// so that each line is valid JSON.
std::string JsonEscaped(std::string_view text) {
  const bool utf8 = s3::IsValidUtf8(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 ||
               (!utf8 && static_cast<unsigned char>(c) > 0x7f)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view name) {
  static constexpr NamedValue<LogFormat> kFormats[] = {{LogFormat::kText, "text"},
                                                       {LogFormat::kJson, "json"}};
  return ParseNameIn(kFormats, name, "log format");
}

void SetLogFormat(LogFormat format) { g_json = format == LogFormat::kJson; }

Result<LogLevel> ParseLogLevel(std::string_view name) {
  return ParseNameIn(kLevelNames, name, "log level");
}

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  static constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  const std::string stamp = FormatUtc(t, "%Y-%m-%dT%H:%M:%S");
  std::lock_guard lock(g_mu);
  if (g_json) {
    const std::string msg = JsonEscaped(message);
    std::fprintf(stderr, "{\"time\": \"%s.%03dZ\", \"level\": \"%s\", \"msg\": \"%s\"}\n",
                 stamp.c_str(), ms, NameIn(kLevelNames, level).data(), msg.c_str());
  } else {
    // A message can name what a client sent (a key, a credential): one line, whatever it holds.
    const std::string msg = EscapeControlBytes(message);
    std::fprintf(stderr, "%s.%03dZ %-5s %.*s\n", stamp.c_str(), ms, kNames[static_cast<int>(level)],
                 static_cast<int>(msg.size()), msg.data());
  }
  std::fflush(stderr);
}

}  // namespace objectcache::server
