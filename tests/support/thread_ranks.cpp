#include "support/thread_ranks.h"

#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/inproc/inproc_channel.h"
#include "engine/runtime.h"
#include "model/libtorch.h"

namespace rp::test {
namespace {

engine::RuntimeParts threadParts(control::InProcHub& node, control::InProcHub& world, int rank,
                                 transport::TensorChannelFactory tensors) {
  engine::RuntimeParts parts;
  parts.identity.rank = parts.identity.localRank = rank;
  parts.identity.size = parts.identity.localSize = node.size();
  parts.identity.hostname = "in-process";
  for (int r = 0; r < node.size(); ++r) parts.identity.places.push_back({0, r, "in-process"});
  parts.node = std::make_unique<control::InProcChannel>(node, rank);
  parts.world = std::make_unique<control::InProcChannel>(world, rank);
  parts.nodeMemory = memory::shareInProcess;
  parts.tensors = std::move(tensors);
  return parts;
}

}  // namespace

ThreadRun runOnThreads(const config::RunConfig& config, int workers, TensorPlane plane,
                       const std::vector<std::string>& names, bool failing) {
  control::InProcHub node(workers), world(workers);
  const transport::TensorChannelFactory tensors =
      plane == TensorPlane::kHostStaged  ? transport::TensorChannelFactory(transport::hostStaged)
      : plane == TensorPlane::kDirect    ? transport::TensorChannelFactory(transport::deviceDirect)
      : plane == TensorPlane::kPeerLinks ? transport::TensorChannelFactory(transport::peerLinks)
                                         : transport::inProcess(transport::newInProcTensorHub());
  // LibTorch creates its default CPU generator and its CUDA hooks lazily, once, under guards inside its own
  // (uninstrumented) library, and every rank seeds them: create them here, before the ranks start, as a real
  // rank's process does alone (otherwise ThreadSanitizer reports the first use as a race).
  torch::manual_seed(static_cast<std::uint64_t>(config.train.seed));
  ThreadRun out;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        engine::PipelineRuntime runtime(config, threadParts(node, world, r, tensors));
        auto metrics = runtime.run();
        if (r != 0) return;
        out.metrics = std::move(metrics);
        for (const auto& name : names) out.weights[name] = runtime.storeWeight(name);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          out.errors.push_back(fmt::format("rank {}: {}", r, e.what()));
        }
        // As MPI_Abort would: the other ranks' waits on this one end now, naming it.
        node.abandon(r, e.what());
        world.abandon(r, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!failing) {
    for (const auto& e : out.errors) ADD_FAILURE() << e;
  }
  return out;
}

}  // namespace rp::test
