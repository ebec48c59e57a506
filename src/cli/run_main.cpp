#include "cli/run_main.h"

#include <exception>

#include "common/error.h"
#include "common/log.h"

namespace rp::cli {

int runMain(const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    RP_LOG_ERROR("{}", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    RP_LOG_ERROR("{}", e.what());
    return kExitFailure;
  }
}

}  // namespace rp::cli
