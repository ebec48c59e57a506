// The one registry of MPI tags (docs/protocol.md). Every point-to-point message roundpipe sends uses one
// of these; values are unique (tested) and stay below MPI_TAG_UB's guaranteed minimum (32767).
#pragma once

#include <array>

namespace rp::control {

enum class Tag : int {
  kStageReady = 101,   // StageReady: job k's microbatch m is in the arena; from job k's worker to job k+1's
  kDirective = 102,    // coordinator::Directive (length, then body): rank 0 to every rank, once per iteration
  kTimings = 103,      // per-layer times of one iteration: every rank but 0 to rank 0 (world communicator)
  kStopRequest = 104,  // a rank other than 0 received a preemption signal: once, to rank 0 (world communicator)
};

inline constexpr std::array<Tag, 4> kAllTags{Tag::kStageReady, Tag::kDirective, Tag::kTimings, Tag::kStopRequest};

inline int mpiTag(Tag tag) {
  return static_cast<int>(tag);
}

}  // namespace rp::control
