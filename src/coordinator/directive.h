// What rank 0 tells every rank at the start of an iteration (docs/protocol.md, "Directives"): the plan and
// the dispatch table to run. Encoded as a flat array of int64 with a version, sent as a length message and a
// body message on Tag::kDirective. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/dispatch.h"
#include "schedule/plan.h"

namespace rp::coordinator {

inline constexpr std::int64_t kDirectiveVersion = 2;

struct Directive {
  std::int64_t step = 0;
  bool planChanged = false;  // true at the first iteration and whenever rank 0 re-partitioned
  bool stop = false;         // do not run this iteration: save a checkpoint and exit (preemption)
  schedule::Plan plan;
  schedule::DispatchTable table;
  bool operator==(const Directive&) const = default;
};

std::vector<std::int64_t> encode(const Directive& directive);
// Throws control::PeerError naming `fromRank` when the words are not a version-1 directive for a model of
// `layerCount` layers run by `workers` workers (a version skew between binaries, or corruption).
Directive decode(const std::vector<std::int64_t>& words, int layerCount, int workers, int fromRank);

}  // namespace rp::coordinator
