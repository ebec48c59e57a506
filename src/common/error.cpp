#include "common/error.h"

#include <string>

namespace rp::detail {

void throwInternal(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError("internal error: " + msg + " (" + file + ":" + std::to_string(line) + "): check `" + cond +
                      "` failed");
}

}  // namespace rp::detail
