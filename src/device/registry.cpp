// The backend registry: the only file outside device/cuda/ that knows whether CUDA was compiled in.
#include "device/device.h"

#include "common/error.h"
#include "device/cpu/cpu_worker.h"
#include "device/worker.h"

#if RP_WITH_CUDA
#include "device/cuda/cuda_probe.h"
#include "device/cuda/cuda_worker.h"
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

std::unique_ptr<Worker> makeWorker(Backend backend, const WorkerOptions& options) {
  switch (backend) {
    case Backend::kCpu:
      return std::make_unique<CpuWorker>(options);
    case Backend::kCuda:
#if RP_WITH_CUDA
      return cuda::makeCudaWorker(options);
#else
      break;
#endif
  }
  RP_THROW(InputError, "no {} worker in this build (configured with RP_WITH_CUDA=OFF): set pipeline.backend = \"cpu\"",
           backendName(backend));
}

}  // namespace rp::device
