// Note [Stream-ordered hand-offs] on a real device: a stage input's upload orders the compute that reads it
// (Worker::computeAfter: the compute stream waits on the event the copy's ticket carries) without the host
// waiting for the copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "device/worker.h"
#include "gpu_skip.h"
#include "model/libtorch.h"

namespace rp::device {
namespace {

TEST(CudaStreamOrder, TheComputeReadsAnUploadTheHostDidNotWaitFor) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = makeWorker(Backend::kCuda, WorkerOptions{64u << 20, 0});
  constexpr std::int64_t kFloats = 256ll << 20;  // 1 GiB: tens of milliseconds over any link
  const std::size_t bytes = static_cast<std::size_t>(kFloats) * sizeof(float);
  std::vector<float> host(static_cast<std::size_t>(kFloats), 3.0F);
  const auto pin = worker->pinHost(host.data(), bytes, "test upload");
  ASSERT_NE(pin, nullptr) << "cudaHostRegister failed (see the warning above): the copy would not be asynchronous";
  const auto scope = worker->enterCompute();
  torch::Tensor input = torch::zeros({kFloats}, torch::TensorOptions().device(torch::kCUDA, 0));
  const Ticket upload = worker->copyUrgent(input.data_ptr(), host.data(), bytes);
  worker->computeAfter(upload);
  const bool hostWentOn = !upload.done();
  const bool sawTheUpload = input.eq(3.0F).all().item<bool>();  // compute issued after computeAfter
  EXPECT_TRUE(hostWentOn) << "computeAfter waited on the host for a 1 GiB upload";
  EXPECT_TRUE(sawTheUpload) << "the compute read the input before its upload landed";
}

}  // namespace
}  // namespace rp::device
