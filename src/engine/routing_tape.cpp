#include "engine/routing_tape.h"

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

// A slot: the counts (int64) first, then the experts (int32: expert ids < 2^31), padded to 8 bytes.
std::size_t slotBytes(std::int64_t tokens, int topK, int experts) {
  const std::size_t ids = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(topK) * sizeof(std::int32_t);
  return static_cast<std::size_t>(experts) * sizeof(std::int64_t) + (ids + 7) / 8 * 8;
}

}  // namespace

std::size_t RoutingTape::regionBytes(int microbatches, int layers, std::int64_t tokens, int topK, int experts) {
  return static_cast<std::size_t>(microbatches) * static_cast<std::size_t>(layers) * slotBytes(tokens, topK, experts);
}

RoutingTape::RoutingTape(std::uint8_t* region, int microbatches, int layers, std::int64_t tokens, int topK,
                         int experts)
    : base_(region), microbatches_(microbatches), layers_(layers), topK_(topK), experts_(experts), tokens_(tokens) {}

std::uint8_t* RoutingTape::slot(int mb, int layer) const {
  RP_CHECK(mb >= 0 && mb < microbatches_ && layer >= 0 && layer < layers_, "routing slot ({}, {}) out of range", mb,
           layer);
  return base_ + (static_cast<std::size_t>(mb) * layers_ + layer) * slotBytes(tokens_, topK_, experts_);
}

void RoutingTape::put(int mb, int layer, const model::ExpertChoice& choice) {
  RP_CHECK(choice.experts.numel() == tokens_ * topK_ && choice.counts.numel() == experts_,
           "layer {}: an expert choice of {} ids and {} counts, expected {} and {}", layer, choice.experts.numel(),
           choice.counts.numel(), tokens_ * topK_, experts_);
  std::uint8_t* at = slot(mb, layer);
  torch::NoGradGuard noGrad;
  torch::from_blob(at, {experts_}, torch::kInt64).copy_(choice.counts);
  torch::from_blob(at + experts_ * sizeof(std::int64_t), {tokens_, topK_}, torch::kInt32).copy_(choice.experts);
}

model::ExpertChoice RoutingTape::get(int mb, int layer) const {
  std::uint8_t* at = slot(mb, layer);
  model::ExpertChoice choice;
  choice.counts = torch::from_blob(at, {experts_}, torch::kInt64);
  choice.experts =
      torch::from_blob(at + experts_ * sizeof(std::int64_t), {tokens_, topK_}, torch::kInt32).to(torch::kInt64);
  return choice;
}

}  // namespace rp::engine
