#include "common/version.h"

namespace rp {

// RP_VERSION and RP_COMMIT are this file's compile definitions alone (src/common/CMakeLists.txt): a new commit
// recompiles it and nothing else.
const char* version() {
  return RP_VERSION;
}

const char* commit() {
  return RP_COMMIT;
}

std::string versionLine() {
  return std::string("roundpipe ") + version() + " (commit " + commit() + ")";
}

}  // namespace rp
