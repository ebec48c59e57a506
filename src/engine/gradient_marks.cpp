#include "engine/gradient_marks.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace rp::engine {
namespace {

struct Hook : torch::autograd::PostAccumulateGradHook {
  explicit Hook(std::function<void()> fn) : fn(std::move(fn)) {}
  void operator()(const torch::autograd::Variable&) override { fn(); }
  std::function<void()> fn;
};

}  // namespace

GradientMarks::GradientMarks(const std::map<int, std::vector<torch::Tensor>>& owned, TakeMark takeMark)
    : takeMark_(std::move(takeMark)) {
  for (const auto& [layer, tensors] : owned) {
    layers_[layer].pending = static_cast<int>(tensors.size());
    for (const torch::Tensor& t : tensors) {
      const std::size_t index = hooked_.size();
      hooked_.push_back(t);
      layerOf_.push_back(layer);
      counted_.push_back(false);
      torch::autograd::impl::set_post_acc_grad_hooks(t, std::make_unique<Hook>([this, index] { accumulated(index); }));
    }
  }
}

GradientMarks::~GradientMarks() {
  for (const torch::Tensor& t : hooked_) torch::autograd::impl::set_post_acc_grad_hooks(t, nullptr);
}

std::shared_ptr<device::ComputeMark> GradientMarks::of(int layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = layers_.find(layer);
  return it == layers_.end() ? nullptr : it->second.mark;
}

void GradientMarks::accumulated(std::size_t tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (counted_[tensor]) return;
  counted_[tensor] = true;
  Layer& layer = layers_[layerOf_[tensor]];
  if (--layer.pending == 0) layer.mark = takeMark_();
}

}  // namespace rp::engine
