#include "support/pipeline_reference.h"

#include <cmath>

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "train/trainer.h"

namespace rp::test {

void expectEqualsTrainer(const config::RunConfig& config, const PipelineResult& pipeline, double weightTolerance) {
  train::Trainer reference(config);
  for (std::size_t s = 0; s < pipeline.metrics.size(); ++s) {
    const auto rows = reference.packer().next(config.train.globalBatch);
    const auto grads = reference.computeGradients(rows, config.train.microbatches);
    const auto m = reference.applyStep(static_cast<std::int64_t>(s), grads);
    EXPECT_NEAR(pipeline.metrics[s].loss, m.loss, 1e-6 * std::abs(m.loss)) << "step " << s + 1;
    EXPECT_NEAR(pipeline.metrics[s].gradNorm, m.gradNorm, 1e-5 * m.gradNorm) << "step " << s + 1;
  }
  for (const auto& [name, param] : reference.trainable()) {
    const double err = (pipeline.weight(name) - param.detach()).abs().max().item<double>();
    EXPECT_LE(err, weightTolerance) << name;
  }
}

void expectEqualsDelayedUpdate(const config::RunConfig& config, const PipelineResult& pipeline,
                               double weightTolerance) {
  train::Trainer reference(config);
  std::vector<torch::Tensor> masters;
  optim::AdamW adamw({config.optim.lr, config.optim.beta1, config.optim.beta2, config.optim.eps,
                      config.optim.weightDecay, config.optim.amsgrad});
  for (std::size_t i = 0; i < reference.trainable().size(); ++i) {
    masters.push_back(reference.trainable()[i].second.detach().clone());
    adamw.add(reference.trainable()[i].first, masters.back().data_ptr<float>(),
              reference.gradSlots()[i].data_ptr<float>(), static_cast<std::size_t>(masters.back().numel()));
  }
  for (std::size_t s = 0; s < pipeline.metrics.size(); ++s) {
    const auto grads =
        reference.computeGradients(reference.packer().next(config.train.globalBatch), config.train.microbatches);
    const double loss = grads.lossSum / static_cast<double>(grads.targetTokens);
    EXPECT_NEAR(pipeline.metrics[s].loss, loss, 1e-6 * loss) << "step " << s + 1;
    {
      torch::NoGradGuard noGrad;
      for (std::size_t i = 0; i < masters.size(); ++i) reference.trainable()[i].second.copy_(masters[i]);
    }
    std::vector<optim::GradBuffer> buffers;
    for (const auto& slot : reference.gradSlots())
      buffers.push_back({slot.data_ptr<float>(), static_cast<std::size_t>(slot.numel())});
    const double norm = optim::clipGradNorm(buffers, config.train.gradClip);
    EXPECT_NEAR(pipeline.metrics[s].gradNorm, norm, 1e-5 * norm) << "step " << s + 1;
    adamw.step(config.optim.lr);
  }
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const auto& name = reference.trainable()[i].first;
    EXPECT_LE((pipeline.weight(name) - masters[i]).abs().max().item<double>(), weightTolerance) << name;
  }
}

}  // namespace rp::test
