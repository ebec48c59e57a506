// Rank-aware logging: every line carries the time since start, the rank (once known) and the level.
// Thread-safe: lines from different threads never interleave.
#pragma once

#include <string>

#include "common/fmt.h"

namespace rp::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Sets the rank shown in every line (-1 = unknown, shown as "-").
void setRank(int rank);
bool enabled(Level level);
void write(Level level, const std::string& message);

}  // namespace rp::log

#define RP_LOG_AT(level, ...)                                                         \
  do {                                                                                \
    if (::rp::log::enabled(level)) ::rp::log::write(level, fmt::format(__VA_ARGS__)); \
  } while (0)
#define RP_LOG_DEBUG(...) RP_LOG_AT(::rp::log::Level::kDebug, __VA_ARGS__)
#define RP_LOG_INFO(...) RP_LOG_AT(::rp::log::Level::kInfo, __VA_ARGS__)
#define RP_LOG_WARN(...) RP_LOG_AT(::rp::log::Level::kWarn, __VA_ARGS__)
#define RP_LOG_ERROR(...) RP_LOG_AT(::rp::log::Level::kError, __VA_ARGS__)
