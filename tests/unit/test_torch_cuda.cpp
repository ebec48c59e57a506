// LibTorch's CUDA kernels are not linked but loaded where a driver is (Note [LibTorch's CUDA kernels],
// src/device/cuda/torch_cuda.cpp): this binary starts without them, the CUDA worker refuses to start without
// them, the loader loads them exactly where libcuda.so.1 loads, and once loaded (here forced, without a driver)
// their kernels are registered and LibTorch's CUDA hooks are the real ones, not the stub a process keeps when it
// asked before the load.
#include <dlfcn.h>

#include <string>

#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "device/worker.h"

#if RP_WITH_CUDA
#include "device/cuda/cuda_worker.h"
#endif

namespace rp::device {
namespace {

TEST(TorchCudaKernels, LoadWhereTheDriverIsAndOnlyThere) {
#if !RP_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (RP_WITH_CUDA=OFF)";
#else
  ASSERT_FALSE(cuda::torchCudaLoaded()) << "this binary links libtorch_cuda.so, or something loaded it already";
  try {
    (void)cuda::makeCudaWorker(WorkerOptions{});
    ADD_FAILURE() << "a CUDA worker started without LibTorch's CUDA kernels";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("rp::device::loadCudaKernels()"), std::string::npos) << e.what();
  }
  const bool driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  EXPECT_EQ(cuda::loadTorchCuda(/*withoutDriver=*/false), driver);
  EXPECT_EQ(cuda::torchCudaLoaded(), driver);

  ASSERT_TRUE(cuda::loadTorchCuda(/*withoutDriver=*/true));
  EXPECT_TRUE(cuda::torchCudaLoaded());
  // The stub's versionCUDART throws ("without ATen_cuda library"); the real hooks give the runtime's version.
  EXPECT_GT(at::detail::getCUDAHooks().versionCUDART(), 0);
#endif
}

}  // namespace
}  // namespace rp::device
