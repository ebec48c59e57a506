// Note [Gradient marks]: a backward or fused job at stage grain downloads its gradients after its last
// microbatch, and they become final during that microbatch's backward, layer by layer, deepest first. A
// GradientMarks alive over that backward takes a compute mark (Worker::mark) as soon as the last of a layer's
// tensors has accumulated its gradient (autograd's post-accumulate-grad hook), and the download orders that
// layer's copies after its mark only (Worker::copyUrgentAfter): on a GPU the deepest layers' gradients go down
// the link, and the optimizer starts on them, while the shallower layers are still back-propagated — not when
// the stage's backward ends. A layer whose tensors did not all accumulate in that backward (an expert no token
// of the microbatch reached) has no mark; its copies wait for all the compute, as without marks.
// Thread-safety: on a GPU autograd runs the hooks on its device thread; they only take the mark (an event
// recorded on the compute stream) under a mutex. of() after the backward has returned.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "device/worker.h"
#include "model/libtorch.h"

namespace rp::engine {

class GradientMarks {
 public:
  using TakeMark = std::function<std::shared_ptr<device::ComputeMark>()>;
  // `owned`: each layer's tensors (autograd leaves) whose gradients its download carries; a tensor belongs to
  // one layer. Installs one hook per tensor, replacing any the tensor had.
  GradientMarks(const std::map<int, std::vector<torch::Tensor>>& owned, TakeMark takeMark);
  ~GradientMarks();  // removes the hooks
  GradientMarks(const GradientMarks&) = delete;
  GradientMarks& operator=(const GradientMarks&) = delete;

  // The mark taken once every tensor of `layer` had accumulated its gradient; null if that did not happen.
  std::shared_ptr<device::ComputeMark> of(int layer) const;

 private:
  void accumulated(std::size_t tensor);

  struct Layer {
    int pending = 0;  // tensors yet to accumulate
    std::shared_ptr<device::ComputeMark> mark;
  };
  TakeMark takeMark_;
  mutable std::mutex mutex_;
  std::map<int, Layer> layers_;
  std::vector<torch::Tensor> hooked_;
  std::vector<int> layerOf_;   // per hooked tensor
  std::vector<bool> counted_;  // per hooked tensor: its accumulation was counted
};

}  // namespace rp::engine
