// Which roundpipe this is: the project's version and the commit it was built from (docs/building.md, "Version").
#pragma once

#include <string>

namespace rp {

// "0.1.0"
const char* version();
// The commit the build was configured at (`git describe --always --dirty`: "3edbab0a1b2c", "...-dirty"), or
// "unknown" outside a git checkout.
const char* commit();
// "roundpipe 0.1.0 (commit 3edbab0a1b2c)": every tool's --version, the training log's first line, the
// checkpoint manifests' "written_by".
std::string versionLine();

}  // namespace rp
