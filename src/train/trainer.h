// The single-process trainer: one worker, plain LibTorch forward/backward over microbatches, the host
// optimizer on fp32 master weights. It is the numerical reference the pipeline runtime is held to. Its run
// is the shared step loop (run/loop.h) over the primitives below.
// Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/saver.h"
#include "config/run_config.h"
#include "data/corpus.h"
#include "data/packer.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "run/checkpointing.h"
#include "run/loop.h"
#include "run/moments.h"
#include "trace/metrics.h"

namespace rp::train {

struct GradientResult {
  double lossSum = 0.0;  // summed token loss (unscaled)
  double auxLoss = 0.0;  // MoE: the microbatches' mean load-balancing loss (times its coefficient)
  std::int64_t targetTokens = 0;
  std::int64_t tokens = 0;
};

class Trainer : public run::Executor {
 public:
  explicit Trainer(config::RunConfig config);

  // run::runLoop over this trainer: every step (from the checkpoint's step when resuming), metrics.jsonl and
  // the effective config in output.dir, checkpoints (checkpoint.*). Returns false when a preemption signal
  // stopped it after saving (run/preemption.h).
  bool run();

  // run::Executor. snapshot: the state after `step` optimizer steps, staged as checkpoint slices (copies)
  // with the manifest.
  std::int64_t startStep() const override { return startStep_; }
  std::int64_t epoch() const override { return packer_->cursor().epoch; }
  std::int64_t tokensPerEpoch() const override { return static_cast<std::int64_t>(corpus_.tokens.size()); }
  bool reports() const override { return true; }
  std::optional<run::CheckpointWriters> checkpointWriters() const override { return run::CheckpointWriters{}; }
  bool step(std::int64_t step, int signal) override;
  run::StopCause stopCause() const override { return {stopSignal_, 0}; }
  std::vector<trace::StepMetrics> finished() override;
  std::optional<checkpoint::SaveJob> snapshot(std::int64_t step) override;
  void drain(std::int64_t) override {}
  void finish() override {}
  std::string sample(const std::string& prompt) override;
  std::optional<run::EvalResult> evaluate(std::int64_t steps) override;
  double modelFlopsPerStep() const override;
  double peakFlops() const override;

  // Forward/backward of one step's rows split into `microbatches`; leaves d(mean token loss)/d(param)
  // in the fp32 gradient slots (multiplied by `lossScale`).
  GradientResult computeGradients(const std::vector<data::PackedRow>& rows, std::int64_t microbatches,
                                  double lossScale = 1.0);
  // One optimizer step from the gradient slots (clip, schedule, AdamW, copy back); returns the metrics.
  trace::StepMetrics applyStep(std::int64_t step, const GradientResult& grads);

  model::CausalLM& model() { return *model_; }
  data::Packer& packer() { return *packer_; }
  // Trainable parameters (HF or PEFT names) and their fp32 gradient slots, in the same order.
  const std::vector<model::NamedTensor>& trainable() const { return trainable_; }
  const std::vector<torch::Tensor>& gradSlots() const { return slots_; }
  // Their float32 masters (the parameters themselves in a float32 run).
  const std::vector<torch::Tensor>& masters() const { return masters_; }

 private:
  config::RunConfig config_;
  torch::ScalarType dtype_;
  std::shared_ptr<model::CausalLM> model_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  data::TokenizedCorpus corpus_;
  nlohmann::json identity_;                // the dataset and batch shape, as checkpoints record them (run::runIdentity)
  std::vector<data::PackedRow> evalRows_;  // empty without evaluation data
  std::unique_ptr<data::Packer> packer_;
  std::vector<model::NamedTensor> trainable_;
  std::vector<torch::Tensor> masters_;  // fp32; the parameter itself when the model is fp32
  std::vector<torch::Tensor> slots_;    // fp32 gradients
  std::unique_ptr<optim::AdamW> adamw_;
  int optimThreads_ = 1;  // of AdamW and the norm (optim.threads; common/parallel.h)
  optim::LrSchedule schedule_;
  std::unique_ptr<optim::LossScaler> scaler_;  // fp16 only
  std::int64_t startStep_ = 0;                 // > 0 when resumed
  std::int64_t tokensSeen_ = 0, targetTokensSeen_ = 0;
  int stopSignal_ = 0;                        // the preemption signal that stopped the run (step)
  std::vector<trace::StepMetrics> finished_;  // steps run since the loop last asked

  // The tensors of the state, by checkpoint kind (trainer_state.cpp).
  // The masters and the moments (run/moments.h); a restore passes the checkpoint's manifest, whose moments in the
  // other width moments_ converts once read.
  std::vector<checkpoint::Slice> stateSlices(const checkpoint::Manifest* saved = nullptr) const;
  mutable run::MomentSlices moments_;
  void restore(const run::Resume& resume);
};

}  // namespace rp::train
