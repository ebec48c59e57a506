// fmt as every translation unit of roundpipe sees it: Debian's, the one the program links (Note [One fmt],
// cmake/RpDependencies.cmake). A unit that reached LibTorch's bundled fmt instead stops here.
#pragma once

#include <fmt/format.h>

#if defined(RP_FMT_VERSION) && FMT_VERSION != RP_FMT_VERSION
#error "this unit sees another fmt than the one the program links: Note [One fmt], cmake/RpDependencies.cmake"
#endif
