#include "common/env.h"

#include <cstdlib>

#include "common/error.h"

namespace rp::env {

std::string get(const Var& var) {
  const char* value = std::getenv(var.name);
  if (value == nullptr || *value == '\0') return var.fallback;
  return value;
}

long getInt(const Var& var) {
  const std::string value = get(var);
  char* end = nullptr;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || end == nullptr || *end != '\0') {
    RP_THROW(InputError, "environment variable {}='{}' is not an integer ({})", var.name, value, var.help);
  }
  return parsed;
}

}  // namespace rp::env
