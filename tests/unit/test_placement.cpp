// Which device a rank computes on: pipeline.backend, the GPUs the probe found, pipeline.ranks_per_gpu — and
// the errors a user gets when they do not add up (docs/gpu.md, "Placement").
#include <gtest/gtest.h>

#include "common/error.h"
#include "device/device.h"
#include "device/placement.h"

namespace rp::device {
namespace {

Inventory gpus(int n) {
  Inventory inv;
  inv.cudaCompiled = true;
  inv.cudaDevices = n;
  inv.backend = n > 0 ? Backend::kCuda : Backend::kCpu;
  inv.reason = n > 0 ? "found" : "cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver)";
  return inv;
}

std::string errorOf(const PlacementRequest& request, const Inventory& inventory) {
  try {
    place(request, inventory);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// The tensor peaks MFU is measured against, by the names the CUDA runtime reports (data-sheet values: dense
// bf16/fp16 with fp32 accumulate).
TEST(Placement, TensorPeakByTheCudaDeviceName) {
  EXPECT_EQ(tensorPeakTflops("NVIDIA H100 80GB HBM3"), 989.4);
  EXPECT_EQ(tensorPeakTflops("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(tensorPeakTflops("NVIDIA H200"), 989.4);
  EXPECT_EQ(tensorPeakTflops("NVIDIA GeForce RTX 4090"), 165.2);
  EXPECT_EQ(tensorPeakTflops("NVIDIA GeForce RTX 3090"), 71.0);
  EXPECT_EQ(tensorPeakTflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(tensorPeakTflops("NVIDIA A10"), 125.0);
  EXPECT_EQ(tensorPeakTflops("NVIDIA L40S"), 362.1);
  EXPECT_EQ(tensorPeakTflops("NVIDIA L4"), 121.0);
  EXPECT_EQ(tensorPeakTflops("Tesla V100-SXM2-32GB"), 125.0);
  EXPECT_EQ(tensorPeakTflops("Some Future GPU"), 0.0) << "unknown: no MFU rather than a wrong one";
  EXPECT_EQ(tensorPeakTflops(""), 0.0);
}

TEST(Placement, AutoTakesTheGpuWhereThereIsOneAndSaysWhyNot) {
  const Placed cpu = place({BackendChoice::kAuto, 0, 1, 1}, gpus(0));
  EXPECT_EQ(cpu.backend, Backend::kCpu);
  EXPECT_NE(cpu.why.find("cudaErrorInsufficientDriver"), std::string::npos) << cpu.why;
  const Placed gpu = place({BackendChoice::kAuto, 0, 1, 1}, gpus(1));
  EXPECT_EQ(gpu.backend, Backend::kCuda);
  EXPECT_EQ(gpu.device, 0);
  EXPECT_EQ(place({BackendChoice::kCpu, 0, 1, 1}, gpus(8)).backend, Backend::kCpu);
}

TEST(Placement, OneRankPerGpuInLocalRankOrder) {
  for (int r = 0; r < 8; ++r) {
    const Placed p = place({BackendChoice::kCuda, r, 8, 1}, gpus(8));
    EXPECT_EQ(p.backend, Backend::kCuda);
    EXPECT_EQ(p.device, r);
    EXPECT_NE(p.why.find("cuda:" + std::to_string(r)), std::string::npos) << p.why;
  }
  EXPECT_EQ(place({BackendChoice::kCuda, 1, 2, 1}, gpus(4)).device, 1);  // more GPUs than ranks: the first ones
}

TEST(Placement, RanksShareAGpuWhenAsked) {
  const int devices[] = {0, 0, 1, 1, 2};  // 5 ranks, 2 per GPU, 3 GPUs
  for (int r = 0; r < 5; ++r) EXPECT_EQ(place({BackendChoice::kCuda, r, 5, 2}, gpus(3)).device, devices[r]);
  EXPECT_EQ(place({BackendChoice::kCuda, 3, 4, 4}, gpus(1)).device, 0);
}

TEST(Placement, TooFewGpusOrNoneIsAClearError) {
  const std::string none = errorOf({BackendChoice::kCuda, 0, 2, 1}, gpus(0));
  EXPECT_NE(none.find("pipeline.backend = \"cuda\" but there is no usable GPU: cudaGetDeviceCount"), std::string::npos)
      << none;
  const std::string few = errorOf({BackendChoice::kAuto, 0, 4, 1}, gpus(1));
  EXPECT_NE(few.find("4 ranks on this node with pipeline.ranks_per_gpu = 1 need 4 GPUs, but there are 1 visible"),
            std::string::npos)
      << few;
  EXPECT_NE(few.find("set pipeline.ranks_per_gpu = 4"), std::string::npos) << few;
  EXPECT_NE(errorOf({BackendChoice::kCuda, 0, 5, 2}, gpus(2)).find("set pipeline.ranks_per_gpu = 3"),
            std::string::npos);
  EXPECT_NE(errorOf({BackendChoice::kCuda, 0, 2, 0}, gpus(2)).find("pipeline.ranks_per_gpu = 0"), std::string::npos);
}

}  // namespace
}  // namespace rp::device
