// The dense attention reference that model/attention.h replaced, for the CPU and GPU tiers: a [B, 1, T, T] mask
// of "same document, causal, inside the window", GPT-OSS's sinks joining each softmax (transformers'
// eager_attention_forward), built here and nowhere in the library.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "model/attention.h"
#include "model/libtorch.h"

namespace rp::test {

// Segment ids [B, T] of documents with lengths drawn from `lengths` per row (the last one cut at T).
inline torch::Tensor segments(const std::vector<std::vector<std::int64_t>>& lengths, std::int64_t T) {
  auto ids = torch::empty({static_cast<std::int64_t>(lengths.size()), T}, torch::kInt64);
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    std::int64_t t = 0, id = 0;
    for (auto length : lengths[r]) {
      for (std::int64_t i = 0; i < length && t < T; ++i) ids[static_cast<std::int64_t>(r)][t++] = id;
      ++id;
    }
    EXPECT_EQ(t, T) << "row " << r << "'s lengths must cover T";
  }
  return ids;
}

// The dense reference: may attend = same segment, causal, inside the window; scores soft-capped before the mask;
// sinks join each softmax.
inline torch::Tensor denseAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& segmentIds, const model::AttendOptions& o) {
  const auto B = q.size(0), H = q.size(1), T = q.size(2);
  const auto groups = H / k.size(1);
  const auto keys = k.repeat_interleave(groups, 1), values = v.repeat_interleave(groups, 1);
  const auto on = torch::TensorOptions().device(segmentIds.device()).dtype(torch::kLong);
  const auto i = torch::arange(T, on).view({T, 1}), j = torch::arange(T, on).view({1, T});
  auto allowed = (j <= i).unsqueeze(0).logical_and(segmentIds.unsqueeze(2) == segmentIds.unsqueeze(1));
  if (o.window > 0) allowed = allowed.logical_and((i - j < o.window).unsqueeze(0));
  auto scores = torch::matmul(q, keys.transpose(2, 3)) * o.scale;
  if (o.softcap > 0) scores = o.softcap * torch::tanh(scores / o.softcap);
  scores = scores.masked_fill(allowed.unsqueeze(1).logical_not(), -INFINITY);
  if (o.sinks.defined()) {
    auto logits = torch::cat({scores, o.sinks.view({1, H, 1, 1}).expand({B, H, T, 1})}, -1);
    const auto probs = torch::softmax(logits, -1).narrow(-1, 0, T);
    return torch::matmul(probs, values).transpose(1, 2);
  }
  return torch::matmul(torch::softmax(scores, -1), values).transpose(1, 2);
}

}  // namespace rp::test
