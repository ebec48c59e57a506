// GPU tier: runs a kernel on every visible CUDA device; skips itself where there is none.
#include <gtest/gtest.h>

#include "device/device.h"

namespace rp::device {
namespace {

TEST(GpuDevice, ProbeExplainsItsChoice) {
  const Inventory inv = probe();
  EXPECT_FALSE(inv.reason.empty());
  if (inv.cudaDevices == 0) {
    EXPECT_EQ(inv.backend, Backend::kCpu) << inv.reason;
  }
}

TEST(GpuDevice, KernelRunsOnEveryDevice) {
  const Inventory inv = probe();
  if (inv.cudaDevices == 0) GTEST_SKIP() << "no usable GPU: " << inv.reason;
  for (int i = 0; i < inv.cudaDevices; ++i) EXPECT_EQ(cudaSelfTest(i), "") << "device " << i;
}

}  // namespace
}  // namespace rp::device
