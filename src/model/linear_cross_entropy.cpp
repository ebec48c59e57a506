#include "model/linear_cross_entropy.h"

#include <algorithm>

namespace rp::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// d(sum loss)/d(logits) of a chunk: softmax - one_hot(target) on rows with a target, 0 on the others (float32,
// in place over `logits`).
torch::Tensor lossGradient(torch::Tensor logits, const torch::Tensor& targets, std::int64_t ignoreIndex) {
  const auto valid = targets.ne(ignoreIndex);
  logits = logits.softmax(-1);
  logits.scatter_add_(1, targets.clamp_min(0).unsqueeze(1), -valid.to(torch::kFloat).unsqueeze(1));
  return logits.mul_(valid.unsqueeze(1));
}

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, std::int64_t chunk, std::int64_t ignoreIndex,
                               double divisor, double softcap, bool wantHidden, bool wantWeight) {
    const auto rows = hidden.size(0);
    torch::Tensor loss = torch::zeros({}, hidden.options().dtype(torch::kFloat));  // on the compute's device
    torch::Tensor gradHidden = wantHidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor gradWeight = wantWeight ? torch::zeros_like(weight) : torch::Tensor();
    for (std::int64_t start = 0; start < rows; start += chunk) {
      const auto len = std::min(chunk, rows - start);
      const auto h = hidden.narrow(0, start, len);
      const auto t = targets.narrow(0, start, len);
      torch::Tensor raw = torch::linear(h, weight);
      if (divisor != 1.0) raw.div_(divisor);
      torch::Tensor capped;  // tanh(raw / softcap), kept for the gradient
      if (softcap > 0) {
        capped = torch::tanh(raw / softcap);
        raw = capped * softcap;
      }
      torch::Tensor logits = raw.to(torch::kFloat);
      loss.add_(torch::nn::functional::cross_entropy(
          logits, t,
          torch::nn::functional::CrossEntropyFuncOptions().ignore_index(ignoreIndex).reduction(torch::kSum)));
      if (!wantHidden && !wantWeight) continue;
      torch::Tensor g = lossGradient(std::move(logits), t, ignoreIndex).to(hidden.scalar_type());
      if (softcap > 0) g.mul_(1 - capped * capped);  // d(cap tanh(x / cap)) = (1 - tanh^2) dx
      if (divisor != 1.0) g.div_(divisor);           // d(raw logits) = d(logits) / divisor
      if (wantHidden) gradHidden.narrow(0, start, len).copy_(g.mm(weight));
      if (wantWeight) gradWeight.addmm_(g.t(), h);
    }
    ctx->saved_data["hidden"] = gradHidden;
    ctx->saved_data["weight"] = gradWeight;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor& scale = grads[0];  // d(objective)/d(loss), a scalar
    // In the gradient's dtype; the float scalar does not round to it (type promotion keeps the scalar's precision).
    auto scaled = [&](const torch::Tensor& g) { return g.defined() ? g * scale : g; };
    return {scaled(ctx->saved_data["hidden"].toTensor()),
            scaled(ctx->saved_data["weight"].toTensor()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

std::int64_t autoChunkRows(std::int64_t rows, std::int64_t hidden, std::int64_t vocab) {
  const std::int64_t ratio = std::max<std::int64_t>(1, (vocab + hidden - 1) / std::max<std::int64_t>(hidden, 1));
  const std::int64_t byRatio = (rows + ratio - 1) / ratio;
  return std::max<std::int64_t>(1, std::min(rows, std::max(byRatio, kMinAutoChunkRows)));
}

torch::Tensor linearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                 std::int64_t chunkRows, std::int64_t ignoreIndex, const LogitTransform& transform) {
  const bool grad = torch::GradMode::is_enabled();
  return LinearCrossEntropy::apply(hidden, weight, targets, std::max<std::int64_t>(chunkRows, 1), ignoreIndex,
                                   transform.divisor, transform.softcap, grad && hidden.requires_grad(),
                                   grad && weight.requires_grad());
}

}  // namespace rp::model
