// The one catch-all of every roundpipe executable: runs `body`, maps exceptions to exit codes and
// prints them as one error line. Exit codes: 0 ok, 1 internal/system error, 2 bad input (docs/errors.md).
#pragma once

#include <functional>

namespace rp::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

int runMain(const std::function<int()>& body);

}  // namespace rp::cli
