// The CPU's peer links (device/worker.h, PeerLinks): a hub of one FIFO per ordered pair of ranks, shared by the
// ranks of one process (threads as ranks). A send copies at once, so the slot is free when it returns; a
// receive takes the FIFO's head and checks that it is the tensor asked for — the order NCCL needs but cannot
// check, so the in-process tier proves the tensor plane keeps it. Ranks in different processes cannot join.
#pragma once

#include <memory>
#include <string>

#include "device/worker.h"

namespace rp::device {

std::string cpuLinksId();
std::unique_ptr<PeerLinks> joinCpuLinks(const std::string& id, int rank, int ranks, int slots, std::size_t slotBytes);

}  // namespace rp::device
