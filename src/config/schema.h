// The keys of a roundpipe run config (docs/config.md documents each; keep the two in step).
#pragma once

#include <vector>

#include "config/values.h"

namespace rp::config {

const std::vector<KeySpec>& runSchema();

}  // namespace rp::config
