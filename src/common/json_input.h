// Interpreting JSON that came from a file: a field of the wrong type or out of range makes nlohmann throw its
// own exceptions, which are not our error policy's (docs/errors.md). readJson turns them into an InputError
// naming the file, so a malformed file ends in a clear message, never in std::terminate.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp {

// Returns `read()`; a nlohmann::json::exception it throws becomes InputError "<where>: <what was wrong>".
template <typename F>
auto readJson(const std::string& where, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::exception& e) {
    RP_THROW(InputError, "{}: malformed: {}", where, e.what());
  }
}

}  // namespace rp
