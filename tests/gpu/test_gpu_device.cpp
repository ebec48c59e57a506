// GPU tier: the probe counts the GPUs an outside tool sees and says why it chose its backend; a kernel runs on
// every visible CUDA device (skips itself where there is none).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "device/device.h"

namespace rp::device {
namespace {

// The GPUs `nvidia-smi -L` lists ("GPU 0: ..."), narrowed by CUDA_VISIBLE_DEVICES; 0 without nvidia-smi.
int gpusNvidiaSmiLists() {
  int listed = 0;
  if (FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), pipe) != nullptr) listed += std::string(line).rfind("GPU ", 0) == 0;
    ::pclose(pipe);
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return listed;
  const std::string v = visible;
  if (v.empty()) return 0;
  int named = 1;
  for (char c : v) named += c == ',';
  return std::min(listed, named);
}

TEST(GpuDevice, ProbeCountsTheGpusNvidiaSmiListsAndSaysWhy) {
  const Inventory inv = probe();
  if (!inv.cudaCompiled) {
    EXPECT_EQ(inv.backend, Backend::kCpu);
    EXPECT_EQ(inv.reason, "built without CUDA (RP_WITH_CUDA=OFF)");
    return;
  }
  const int expected = gpusNvidiaSmiLists();
  EXPECT_EQ(inv.cudaDevices, expected) << inv.reason;
  if (expected > 0) {
    EXPECT_EQ(inv.backend, Backend::kCuda);
    EXPECT_EQ(inv.reason, std::to_string(expected) + " CUDA device(s) found");
  } else {
    EXPECT_EQ(inv.backend, Backend::kCpu);
    // The CUDA runtime's own error, by name (no driver, an old driver), or that it found no device.
    EXPECT_EQ(inv.reason.rfind("CUDA backend compiled in but no usable GPU: cudaGetDeviceCount ", 0), 0u) << inv.reason;
    EXPECT_TRUE(inv.reason.find("(cudaError") != std::string::npos ||
                inv.reason.find("found 0 devices") != std::string::npos)
        << inv.reason;
  }
}

TEST(GpuDevice, KernelRunsOnEveryDevice) {
  const Inventory inv = probe();
  if (inv.cudaDevices == 0) GTEST_SKIP() << "no usable GPU: " << inv.reason;
  for (int i = 0; i < inv.cudaDevices; ++i) EXPECT_EQ(cudaSelfTest(i), "") << "device " << i;
}

}  // namespace
}  // namespace rp::device
