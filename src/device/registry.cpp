// The backend registry: the only file outside device/cuda/ that knows whether CUDA was compiled in.
#include "device/device.h"

#include "common/error.h"

#if RP_WITH_CUDA
#include "device/cuda/cuda_probe.h"
#endif

namespace rp::device {

const char* backendName(Backend backend) {
  return backend == Backend::kCuda ? "cuda" : "cpu";
}

Inventory probe() {
  static const Inventory inventory = [] {
    Inventory inv;
#if RP_WITH_CUDA
    inv.cudaCompiled = true;
    const cuda::ProbeResult result = cuda::probeDevices();
    inv.cudaDevices = result.count;
    if (result.count > 0) {
      inv.backend = Backend::kCuda;
      inv.reason = fmt::format("{} CUDA device(s) found", result.count);
    } else {
      inv.reason = fmt::format("CUDA backend compiled in but no usable GPU: {}", result.error);
    }
#else
    inv.reason = "built without CUDA (RP_WITH_CUDA=OFF)";
#endif
    return inv;
  }();
  return inventory;
}

std::string cudaSelfTest(int index) {
#if RP_WITH_CUDA
  return cuda::selfTest(index);
#else
  RP_THROW(InputError, "cudaSelfTest({}): this build has no CUDA backend (RP_WITH_CUDA=OFF)", index);
#endif
}

}  // namespace rp::device
