#include "server/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace objectcache::server {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
}  // namespace

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  static constexpr std::pair<std::string_view, LogLevel> kLevels[] = {{"debug", LogLevel::kDebug},
                                                                      {"info", LogLevel::kInfo},
                                                                      {"warn", LogLevel::kWarn},
                                                                      {"error", LogLevel::kError}};
  for (const auto& [n, l] : kLevels) {
    if (n == name) {
      *out = l;
      return true;
    }
  }
  return false;
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
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock(g_mu);
  std::fprintf(stderr, "%s.%03dZ %-5s %.*s\n", stamp, ms, kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

}  // namespace objectcache::server
