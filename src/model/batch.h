// Packed rows -> the model's Batch tensors.
#pragma once

#include <vector>

#include "data/packer.h"
#include "model/layers.h"

namespace rp::model {

// Stacks rows [begin, end) into [rows, seqLen] tensors with positions, segment ids and targets.
model::Batch toBatch(const std::vector<data::PackedRow>& rows, std::size_t begin, std::size_t end);

// The same tensors on `device` (undefined ones stay undefined; no copy when already there; host to GPU from
// pinned memory, without blocking the host).
Batch toDevice(const Batch& batch, torch::Device device);
AttentionContext toDevice(const AttentionContext& context, torch::Device device);

}  // namespace rp::model
