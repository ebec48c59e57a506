#include "device/placement.h"

#include <cstdlib>

#include "common/error.h"

namespace rp::device {

Placed place(const PlacementRequest& r, const Inventory& inv) {
  RP_CHECK(r.localRank >= 0 && r.localRank < r.localSize, "local rank {} of {}", r.localRank, r.localSize);
  if (r.ranksPerDevice < 1) {
    RP_THROW(InputError, "pipeline.ranks_per_gpu = {}: expected at least 1", r.ranksPerDevice);
  }
  if (r.choice == BackendChoice::kCpu) return {Backend::kCpu, -1, "pipeline.backend = \"cpu\""};
  if (r.choice == BackendChoice::kEmulated) {
    return {Backend::kEmulated, r.localRank, "pipeline.backend = \"emulated\": a modelled GPU, nothing computed"};
  }
  if (inv.cudaDevices == 0) {
    if (r.choice == BackendChoice::kCuda) {
      RP_THROW(InputError, "pipeline.backend = \"cuda\" but there is no usable GPU: {}", inv.reason);
    }
    return {Backend::kCpu, -1, fmt::format("pipeline.backend = \"auto\" and {}", inv.reason)};
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string seen = fmt::format("{} visible CUDA device(s){}", inv.cudaDevices,
                                       visible ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : "");
  const int needed = (r.localSize + r.ranksPerDevice - 1) / r.ranksPerDevice;
  if (needed > inv.cudaDevices) {
    const int share = (r.localSize + inv.cudaDevices - 1) / inv.cudaDevices;
    RP_THROW(InputError,
             "{} ranks on this node with pipeline.ranks_per_gpu = {} need {} GPUs, but there are {}: start fewer "
             "ranks, or set pipeline.ranks_per_gpu = {} to share each GPU between that many ranks (or "
             "pipeline.backend = \"cpu\")",
             r.localSize, r.ranksPerDevice, needed, seen, share);
  }
  const int device = r.localRank / r.ranksPerDevice;
  return {Backend::kCuda, device,
          fmt::format("local rank {} on cuda:{} of {}{}", r.localRank, device, seen,
                      r.ranksPerDevice > 1 ? fmt::format(", {} ranks per GPU", r.ranksPerDevice) : "")};
}

}  // namespace rp::device
