#include "engine/router_board.h"

#include <cstring>

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

// A layer's slot: counts [E], probability sums [E], rows (an int64 over two floats: a pass's rows, tokens x
// sparse layers, outgrow float's exact integers). The total's: counts [E], rows.
std::size_t layerFloats(int experts) {
  return 2 * static_cast<std::size_t>(experts) + 2;
}
std::size_t totalFloats(int experts) {
  return static_cast<std::size_t>(experts) + 2;
}

void putRows(float* at, std::int64_t rows) {
  std::memcpy(at, &rows, sizeof(rows));
}
std::int64_t getRows(const float* at) {
  std::int64_t rows = 0;
  std::memcpy(&rows, at, sizeof(rows));
  return rows;
}

torch::Tensor view(float* at, int n) {
  return torch::from_blob(at, {n}, torch::kFloat);
}

}  // namespace

std::size_t RouterBoard::regionBytes(int microbatches, int layers, int experts) {
  const auto m = static_cast<std::size_t>(microbatches);
  return m * (static_cast<std::size_t>(layers) * layerFloats(experts) + totalFloats(experts)) * sizeof(float);
}

RouterBoard::RouterBoard(std::uint8_t* region, int microbatches, int layers, int experts)
    : base_(reinterpret_cast<float*>(region)), layers_(layers), experts_(experts), microbatches_(microbatches) {}

float* RouterBoard::layerSlot(int mb, int layer) const {
  RP_CHECK(mb >= 0 && mb < microbatches_ && layer >= 0 && layer < layers_, "router slot ({}, {}) out of range", mb,
           layer);
  return base_ + (static_cast<std::size_t>(mb) * layers_ + layer) * layerFloats(experts_);
}

float* RouterBoard::totalSlot(int mb) const {
  RP_CHECK(mb >= 0 && mb < microbatches_, "router total {} out of range", mb);
  return base_ + static_cast<std::size_t>(microbatches_) * layers_ * layerFloats(experts_) +
         static_cast<std::size_t>(mb) * totalFloats(experts_);
}

void RouterBoard::putLayer(int mb, int layer, const model::RouterStats& stats) {
  float* slot = layerSlot(mb, layer);
  putRows(slot + 2 * experts_, stats.rows);
  if (stats.rows == 0) return;
  torch::NoGradGuard noGrad;
  view(slot, experts_).copy_(stats.counts);
  view(slot + experts_, experts_).copy_(stats.probSums);
}

model::RouterStats RouterBoard::before(int mb, int layer) const {
  model::RouterStats out;
  for (int l = 0; l < layer; ++l) {
    float* slot = layerSlot(mb, l);
    const std::int64_t rows = getRows(slot + 2 * experts_);
    if (rows > 0) out.add(view(slot, experts_).clone(), view(slot + experts_, experts_).clone(), rows);
  }
  return out;
}

void RouterBoard::putTotal(int mb, const model::RouterStats& total) {
  float* slot = totalSlot(mb);
  torch::NoGradGuard noGrad;
  view(slot, experts_).copy_(total.counts);
  putRows(slot + experts_, total.rows);
}

model::RouterStats RouterBoard::total(int mb) const {
  float* slot = totalSlot(mb);
  model::RouterStats out;
  out.counts = view(slot, experts_).clone();
  out.rows = getRows(slot + experts_);
  return out;
}

}  // namespace rp::engine
