// Control-plane messages (docs/protocol.md). Fixed-size PODs with a version field; sent as MPI_BYTE.
#pragma once

#include <cstdint>

namespace rp::control {

inline constexpr std::uint32_t kProtocolVersion = 1;

// "Job `job` of step `step` has written microbatch `microbatch` to the arena."
struct StageReady {
  std::uint32_t version = kProtocolVersion;
  std::uint32_t microbatch = 0;
  std::int64_t step = 0;
  std::int64_t job = 0;
};

}  // namespace rp::control
