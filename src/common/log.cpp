#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "common/env.h"
#include "common/error.h"

namespace rp::log {
namespace {

std::atomic<int> gRank{-1};
std::mutex gWriteMutex;
const auto gStart = std::chrono::steady_clock::now();

Level parseLevel(const std::string& text) {
  if (text == "debug") return Level::kDebug;
  if (text == "info") return Level::kInfo;
  if (text == "warn") return Level::kWarn;
  if (text == "error") return Level::kError;
  RP_THROW(InputError, "{}='{}': expected one of debug, info, warn, error", env::kLogLevel.name, text);
}

Level minLevel() {
  static const Level level = parseLevel(env::get(env::kLogLevel));
  return level;
}

const char* levelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "D";
    case Level::kInfo:
      return "I";
    case Level::kWarn:
      return "W";
    case Level::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void setRank(int rank) {
  gRank.store(rank);
}

bool enabled(Level level) {
  return static_cast<int>(level) >= static_cast<int>(minLevel());
}

void write(Level level, const std::string& message) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - gStart).count();
  const int rank = gRank.load();
  const std::string who = rank < 0 ? std::string("-") : std::to_string(rank);
  std::lock_guard<std::mutex> lock(gWriteMutex);
  std::fprintf(stderr, "[%9.3f r%s %s] %s\n", seconds, who.c_str(), levelName(level), message.c_str());
}

}  // namespace rp::log
