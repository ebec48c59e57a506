// The keys of a roundpipe run config (docs/config.md documents each; keep the two in step).
#pragma once

#include <string>
#include <vector>

#include "config/values.h"

namespace rp::config {

const std::vector<KeySpec>& runSchema();
// The schema's entry of `key` (an InternalError when there is none).
const KeySpec& runKey(const std::string& key);

}  // namespace rp::config
