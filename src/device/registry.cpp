// The backend registry: the only file outside device/cuda/ that knows whether CUDA was compiled in.
#include "device/device.h"

#include <utility>

#include "common/error.h"
#include "device/cpu/cpu_worker.h"
#include "device/emulated/emulated_worker.h"
#include "device/worker.h"

#if RP_WITH_CUDA
#include "device/cuda/cuda_probe.h"
#include "device/cuda/cuda_worker.h"
#endif

namespace rp::device {

const char* backendName(Backend backend) {
  switch (backend) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kEmulated:
      return "emulated";
    case Backend::kCpu:
      break;
  }
  return "cpu";
}

double tensorPeakTflops(const std::string& name) {
  // Longest names first where one contains another ("H100 PCIe" before "H100").
  static const std::pair<const char*, double> kTable[] = {
      {"H200", 989.4},    {"H100 PCIe", 756.0}, {"H100", 989.4},         {"A100", 312.0},     {"A800", 312.0},
      {"L40S", 362.1},    {"L40", 181.0},       {"RTX 6000 Ada", 364.2}, {"RTX 4090", 165.2}, {"RTX 4080", 97.5},
      {"RTX 3090", 71.0}, {"A6000", 154.8},     {"L4", 121.0},           {"A10", 125.0},      {"V100", 125.0}};
  for (const auto& [key, tflops] : kTable) {
    if (name.find(key) != std::string::npos) return tflops;
  }
  return 0.0;
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

void loadCudaKernels() {
#if RP_WITH_CUDA
  cuda::loadTorchCuda(/*withoutDriver=*/false);
#endif
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
    case Backend::kEmulated:
      return std::make_unique<emulated::EmulatedWorker>(options);
    case Backend::kCuda:
      if (options.computeSpeed != 1.0) {
        RP_THROW(InputError,
                 "RP_SLOW_WORKER slows the cpu backend only: to slow a GPU, lock its clocks (nvidia-smi -lgc) or "
                 "run it beside another job");
      }
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
