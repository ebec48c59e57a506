// Which device each rank computes on (docs/gpu.md, "Placement"): pipeline.backend chooses cpu, cuda or auto
// (cuda where the probe found a GPU); on cuda, local rank r takes device r / pipeline.ranks_per_gpu of the
// devices the CUDA runtime sees (CUDA_VISIBLE_DEVICES applies before numbering). Torch-free.
#pragma once

#include <string>

#include "device/device.h"

namespace rp::device {

struct PlacementRequest {
  BackendChoice choice = BackendChoice::kAuto;
  int localRank = 0;
  int localSize = 1;       // ranks on this node
  int ranksPerDevice = 1;  // pipeline.ranks_per_gpu
};

struct Placed {
  Backend backend = Backend::kCpu;
  int device = -1;  // the CUDA device index; -1 on the CPU
  std::string why;  // for the one log line saying what was chosen
};

// An InputError naming pipeline.backend / pipeline.ranks_per_gpu when cuda was asked for and there is no GPU,
// or there are fewer GPUs than the node's ranks need.
Placed place(const PlacementRequest& request, const Inventory& inventory);

}  // namespace rp::device
