// The references the pipeline runtime is held to, shared by its MPI tier (tests/mpi/test_pipeline.cpp) and its
// in-process tier (tests/unit/test_pipeline_inproc.cpp): the single-process trainer, step for step.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "model/libtorch.h"
#include "trace/metrics.h"

namespace rp::test {

struct PipelineResult {
  std::vector<trace::StepMetrics> metrics;                  // rank 0's, one per step
  std::function<torch::Tensor(const std::string&)> weight;  // the final weights by HF/PEFT name
};

// The equivalence runs' settings (5 steps of 4 microbatches of tiny-shakespeare, one thread, constant lr
// 3e-3, pipeline.backend = cpu) for `model` with `tokenizer`, writing into `out`; the MPI, in-process and GPU
// tiers add their own (later settings win).
std::vector<std::string> equivalenceSettings(const std::string& model, const std::string& tokenizer,
                                             const std::string& fixtures, const std::string& out);

// Relative tolerances on the loss and grad norm; on the final float32 masters either absolute (`weight`) or,
// where `update` > 0, relative to what the reference's training moved them: per tensor,
// ||W_pipeline - W_reference|| <= update * ||W_reference - W_start|| (L2). The half-precision cases take the
// relative form: their rounding differences are a fraction of each update, and an absolute bound loose enough
// for them exceeds the whole movement of 5 steps, so a pipeline that never applied an update would pass it.
struct Tolerance {
  double loss = 1e-6;
  double gradNorm = 1e-5;
  double weight = 1e-5;
  double update = 0;
};

// float32 on a CUDA device: cuBLAS and the fused attention kernels sum in another order than the CPU: 1e-5 on
// the loss; the grad norms and the weights after 5 updates a little looser. Weights: 2e-4, a fifteenth of one
// LoRA update at the case's lr 3e-3 (so a missed or doubled step still fails); measured 1.01e-4 on an H100
// (2026-11-27, a LoRA factor: AdamW's normalisation carries the kernels' differences on near-zero gradients).
constexpr Tolerance kCudaFloat{1e-5, 1e-4, 2e-4};

// What the pipeline is held to, computed once and compared with any number of pipeline runs of the same
// config (the in-process tier runs one case on several planes and worker counts against one reference).
struct Reference {
  std::vector<trace::StepMetrics> steps;        // one per step: loss, grad norm, skipped, loss scale
  std::vector<std::optional<double>> evalLoss;  // the eval loss on the weights after each step (where eval data is)
  std::vector<std::pair<std::string, torch::Tensor>> masters;  // the final float32 masters by HF/PEFT name
  std::vector<torch::Tensor> initial;                          // the same masters before the first step
};

// optim.mode = sync: `config` (the pipeline's config with its own output.dir) trained by the single-process
// trainer's own step loop for train.max_steps steps.
Reference trainerReference(const config::RunConfig& config);

// optim.mode = async, staleness k = config.optim.staleness: iteration t computes on W_{max(0, t-k)}, the
// master after step t-k-1. The reference is the trainer's gradients at those weights (the model takes the
// master's value k steps back before each iteration), each update applied to the master in order.
Reference delayedUpdateReference(const config::RunConfig& config);

// Every step's loss, grad norm, skipped flag and loss scale (fp16), every eval loss the pipeline reports, and
// the final masters, within `tolerance`; the pipeline ran as many steps as the reference.
void expectMatches(const Reference& reference, const PipelineResult& pipeline, Tolerance tolerance);

// The two in one: the reference of `config` computed and compared.
void expectEqualsTrainer(const config::RunConfig& config, const PipelineResult& pipeline, Tolerance tolerance = {});
void expectEqualsDelayedUpdate(const config::RunConfig& config, const PipelineResult& pipeline, double weightTolerance);

}  // namespace rp::test
