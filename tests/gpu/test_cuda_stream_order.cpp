// Note [Stream-ordered hand-offs] on a real device: a stage input's upload orders the compute that reads it
// (Worker::computeAfter: the compute stream waits on the event the copy's ticket carries) without the host
// waiting for the copy. Note [Slot release]: a weight copy waits for the compute up to the mark it is given,
// not for the compute submitted after it.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
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

TEST(CudaStreamOrder, AWeightCopyWaitsOnlyForTheMarkItIsGiven) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = makeWorker(Backend::kCuda, WorkerOptions{64u << 20, 0});
  const auto scope = worker->enterCompute();
  const auto on = torch::TensorOptions().device(torch::kCUDA, 0);
  constexpr std::int64_t kFloats = 16ll << 20;  // 64 MiB: one chunk
  const std::size_t bytes = static_cast<std::size_t>(kFloats) * sizeof(float);
  std::vector<float> host(static_cast<std::size_t>(kFloats), 5.0F);
  const auto pin = worker->pinHost(host.data(), bytes, "test weights");
  auto slot = worker->allocate(bytes);
  torch::Tensor previousJob = torch::ones({kFloats}, on);  // the slot's last reader, then its release mark
  const std::shared_ptr<ComputeMark> released = worker->mark();

  // Well over a second of compute submitted after the mark (the job running in the other slot).
  torch::Tensor a = torch::randn({4096, 4096}, on);
  for (int i = 0; i < 400; ++i) a = torch::matmul(a, a).div_(4096.0);
  at::cuda::CUDAEvent end;
  end.record(c10::cuda::getCurrentCUDAStream());

  Ticket early;
  worker->copyBulk(early, slot.get(), host.data(), bytes, released);
  early.wait();
  EXPECT_FALSE(end.query()) << "the copy after the slot's release mark waited for the compute submitted later";
  std::vector<float> back(host.size(), 0.0F);
  worker->copyUrgentAfter(back.data(), slot.get(), bytes, *released).wait();
  EXPECT_EQ(back, host);

  Ticket late;
  worker->copyBulk(late, slot.get(), host.data(), bytes, nullptr);
  late.wait();
  EXPECT_TRUE(end.query()) << "a copy without a mark waits for all the compute submitted before it";
}

}  // namespace
}  // namespace rp::device
