// Qwen3-MoE experts in two layouts: stacked, as SparseMoe and transformers 5 hold them in memory
// ("model.layers.3.mlp.experts.gate_up_proj" [E, 2I, H], "....experts.down_proj" [E, H, I]), and per expert,
// as published checkpoints store them ("model.layers.3.mlp.experts.7.gate_proj.weight" [I, H], "up_proj"
// [I, H], "down_proj" [H, I]; what transformers 4.x and 5.x and vLLM load). gate_up_proj[e] is gate_proj
// over up_proj. One mapping serves loading (copy each stored part into its view) and export (write the views).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/layers.h"

namespace rp::model {

// Whether `name` is a stacked expert tensor.
bool isStackedExperts(const std::string& name);

// The per-expert tensors of the stacked tensor `name`, as views of `stacked`, in expert order.
std::vector<NamedTensor> perExpertViews(const std::string& name, const torch::Tensor& stacked);

// Replaces every stacked expert tensor in `tensors` by its per-expert tensors (contiguous copies).
void toPublishedLayout(std::map<std::string, torch::Tensor>& tensors);

}  // namespace rp::model
