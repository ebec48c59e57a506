// The resources a pipeline rank runs with: the device it computes on and the worker memory the partitioner
// packs stages by (placeWorker), the host memory the node store and optimizer state need (checkHostMemory), and
// the FLOPs a step takes against what the node's devices give (for MFU). Part of PipelineRuntime (runtime.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/resident_memory.h"
#include "device/placement.h"
#include "engine/emulation.h"
#include "engine/optimizer_worker.h"
#include "engine/runtime.h"
#include "engine/stage_slots.h"
#include "run/setup.h"
#include "run/utilisation.h"
#include "schedule/projection.h"
#include "transport/tensor_channel.h"

namespace rp::engine {

// The device this rank computes on (pipeline.backend, device/placement.h) and the per-worker memory budget
// the partitioner packs stages by: pipeline.memory_limit_gb, or on cuda the device's free memory less
// pipeline.memory_reserve_gb, the least over every rank (rank 0 plans for all of them).
void PipelineRuntime::placeWorker() {
  const auto& c = config_;
  const device::Placed placed = device::place(
      {c.pipeline.backend, id_.localRank, id_.localSize, static_cast<int>(c.pipeline.ranksPerGpu)}, device::probe());
  device::WorkerOptions options{static_cast<std::size_t>(c.pipeline.uploadChunkMb * 1024 * 1024), placed.device,
                                fault::slowWorkerSpeed(id_.rank)};
  if (placed.backend == device::Backend::kEmulated) {
    checkEmulatable();
    options.emulated = emulatedDevice(c);
  }
  worker_ = device::makeWorker(placed.backend, options);
  device_ = torchDevice(worker_->placement());
  switch (placed.backend) {
    case device::Backend::kCpu:
      deviceLabel_ = "cpu";
      break;
    case device::Backend::kCuda:
      deviceLabel_ = "cuda:" + worker_->placement().name;
      break;
    case device::Backend::kEmulated:
      deviceLabel_ = "emulated:" + options.emulated.profile;
      break;
  }
  // A GPU's budget is its free memory (the emulated one's: the profile's, less what is allocated).
  const bool fromDevice = c.pipeline.memoryLimitGb == 0 && placed.backend != device::Backend::kCpu;
  // The ranks on this rank's GPU (pipeline.ranks_per_gpu; the last GPU may have fewer) share its free memory,
  // each with a reserve of its own (its CUDA context, LibTorch's workspace).
  const auto perGpu = static_cast<int>(c.pipeline.ranksPerGpu);
  const int sharing = std::min(perGpu, id_.localSize - id_.localRank / perGpu * perGpu);
  const double free = fromDevice ? static_cast<double>(worker_->freeMemory()) / sharing : 0.0;
  double least = fromDevice ? free - c.pipeline.memoryReserveGb * 1e9 : std::numeric_limits<double>::infinity();
  worldChannel_->allreduce(&least, 1, control::Reduce::kMin);  // every rank, before any of them may throw
  if (least <= 0) {
    if (fromDevice && free - c.pipeline.memoryReserveGb * 1e9 <= 0) {
      RP_THROW(InputError,
               "rank {}: {} has {:.2f} GB free{}, no more than pipeline.memory_reserve_gb = {}: free the GPU (other "
               "processes on it?) or lower the reserve",
               id_.rank, worker_->describe(), free / 1e9,
               sharing > 1 ? fmt::format(" for each of the {} ranks sharing it", sharing) : std::string(),
               c.pipeline.memoryReserveGb);
    }
    RP_THROW(InputError,
             "rank {}: another rank's GPU has no memory beyond pipeline.memory_reserve_gb (its error names it)",
             id_.rank);
  }
  memoryBudget_ = std::isinf(least) ? c.pipeline.memoryLimitGb * 1e9 : least;
  if (memoryBudget_ > 0 && c.pipeline.tensorChannel != config::TensorChannelKind::kHost) {
    // The device-direct ring, or the peer links' send slots, live in worker memory beside the stage slots.
    const double ring =
        static_cast<double>(transport::handOffSlotBytes(static_cast<int>(c.train.microbatches), tensorBytes()));
    memoryBudget_ -= ring;
    if (memoryBudget_ <= 0) {
      RP_THROW(InputError,
               "rank {}: the {} hand-off slots ({:.1f} MB: 4 x {} microbatches x {:.1f} MB) leave no worker memory for "
               "stages; use pipeline.tensor_channel = \"host\" or fewer, smaller microbatches",
               id_.rank, c.pipeline.tensorChannel == config::TensorChannelKind::kDirect ? "device-direct" : "nccl",
               ring / 1e6, c.train.microbatches, static_cast<double>(tensorBytes()) / 1e6);
    }
  }
  RP_LOG_INFO("rank {}: backend {} ({}); {}", id_.rank, device::backendName(placed.backend), placed.why,
              worker_->describe());
  if (leader_ && memoryBudget_ > 0) {
    RP_LOG_INFO("pipeline: stages planned for {:.2f} GB of worker memory each ({})", memoryBudget_ / 1e9,
                std::isinf(least) ? "pipeline.memory_limit_gb"
                                  : "the least free GPU memory, shared by the ranks on a GPU, less the reserve");
  }
}

// What the emulated device cannot run yet (docs/emulated.md, "Not yet"): a mixture of experts routes on values
// (its tokens' experts are read on the host), and an NF4 base dequantises on values.
void PipelineRuntime::checkEmulatable() const {
  const auto& c = config_;
  if (model_->model().config().moe.numExperts > 0) {
    RP_THROW(InputError,
             "{}: pipeline.backend = \"emulated\" runs dense models only: a mixture of experts routes each token by "
             "values the emulated device does not compute (docs/emulated.md)",
             c.values.source({"pipeline.backend"}));
  }
  if (c.lora.rank > 0 && c.lora.nf4Base) {
    RP_THROW(InputError,
             "{}: pipeline.backend = \"emulated\" with lora.base_dtype = \"nf4\" is not supported: the NF4 base is "
             "dequantised from its values (docs/emulated.md)",
             c.values.source({"pipeline.backend", "lora.base_dtype"}));
  }
}

// One microbatch's hidden states (or their gradient) and its bytes: what the tensor plane moves.
// Note [Host memory]: the node store and the optimizer state are the bulk of a node's memory and both are sized
// before anything is allocated or loaded, so a run that cannot fit stops here, on every rank, naming the parts
// (docs/training.md, "Host memory"). Worker stage slots, the activation arena and LibTorch come on top.
void PipelineRuntime::checkHostMemory(double storeBytes) {
  double trainable = 0.0, moments = 0.0, gradients = 0.0;
  for (const auto& t : model_->tensors()) {
    if (!t.trainable) continue;
    const auto n = static_cast<double>(t.local.numel());
    trainable += n;
    moments += optim::momentBytes(t.name, static_cast<std::size_t>(t.local.numel()),
                                  static_cast<int>(config_.optim.stateBits), config_.optim.amsgrad);
    const bool inPlace = gradientsInPlace(static_cast<int>(config_.optim.staleness), id_.nodeCount > 1,
                                          model_->dtype() == torch::kHalf, model_->dtype(), t.layers.size());
    gradients += inPlace ? 0.0 : n * sizeof(float);
  }
  // Over the node's optimizers: a float32 gradient per trainable element not read in place (Note [Gradients read in
  // place]) and the AdamW moments (float32 or 8-bit; sharded across nodes: 1/N of them).
  const double optimizer = gradients + moments / (shardedAcrossNodes() ? id_.nodeCount : 1);
  const HostMemory host = availableHostMemory();
  const double need = storeBytes + optimizer;
  std::int32_t fits = host.availableBytes == 0 || need <= static_cast<double>(host.availableBytes) ? 1 : 0;
  worldChannel_->allreduce(&fits, 1, control::Reduce::kMin);  // every rank, before any of them may throw
  if (fits == 1) return;
  if (need <= static_cast<double>(host.availableBytes)) {
    RP_THROW(InputError, "rank {}: another node has not enough host memory for this run (its error names it)",
             id_.rank);
  }
  RP_THROW(InputError,
           "node {} ({}): this run needs {:.2f} GB of host memory — the node store {:.2f} GB (weights, gradient slots, "
           "masters of {:.0f}M trainable parameters) and the optimizer {:.2f} GB ({}AdamW moments) — but {} leaves "
           "{:.2f} GB: {}lower optim.staleness, or use a node with more memory (docs/training.md, \"Host memory\")",
           id_.node, id_.hostname, need / 1e9, storeBytes / 1e9, trainable / 1e6, optimizer / 1e9,
           gradients > 0.0 ? "float32 gradients and " : "", host.source, static_cast<double>(host.availableBytes) / 1e9,
           run::smallerModelHint(config_));
}

double PipelineRuntime::modelFlopsPerStep() const {
  return run::modelFlopsPerStep(config_, model_->model().config());
}

// Every node alike: its workers' GPUs (ranks sharing one count it once).
double PipelineRuntime::peakFlops() const {
  const int gpus =
      (workers_ + static_cast<int>(config_.pipeline.ranksPerGpu) - 1) / static_cast<int>(config_.pipeline.ranksPerGpu);
  if (worker_->modelsCompute() && config_.output.peakTflops <= 0) {  // the profile's peak, not a name's
    return schedule::loadHardware(emulatedProfilePath(config_)).tensorTflops * 1e12 * gpus * id_.nodeCount;
  }
  return run::peakFlops(config_, worker_->placement().name, gpus * id_.nodeCount);
}

}  // namespace rp::engine
