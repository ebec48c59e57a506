// Note [Router statistics]: the MoE load-balancing loss (docs/moe.md) is a function of every sparse layer's
// router counts and probability sums of a forward pass, but a pipeline stage runs only some layers. Forward
// stages write their layers' statistics (values) to the node store; the fused stage adds the stored ones of
// the layers before it to its own (inside its graph), computes the loss with the head's, and writes the
// pass's total counts; a backward stage, once a microbatch's gradient has arrived (so the fused stage has run
// it), back-propagates scale · Σₑ totalₑ · probSumsₑ of its recomputed layers beside the gradient — the
// gradient the whole-model loss gives those layers, since the counts carry none. The sums run in layer order,
// as the single-process trainer's do. One board per loss buffer (the fences keep at most two iterations in
// flight); internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/layers.h"

namespace rp::engine {

class RouterBoard {
 public:
  static std::size_t regionBytes(int microbatches, int layers, int experts);
  // `region`: regionBytes(...) of node-store memory, zeroed before first use.
  RouterBoard(std::uint8_t* region, int microbatches, int layers, int experts);

  // Layer `layer`'s statistics of microbatch `mb` (values; an empty `stats` marks the layer as dense).
  void putLayer(int mb, int layer, const model::RouterStats& stats);
  // The sum of the stored statistics of layers [0, layer) of `mb`, in layer order, on the CPU (no gradient).
  model::RouterStats before(int mb, int layer) const;
  // The forward pass's total counts and rows of `mb` (written by the fused stage).
  void putTotal(int mb, const model::RouterStats& total);
  model::RouterStats total(int mb) const;

 private:
  float* layerSlot(int mb, int layer) const;
  float* totalSlot(int mb) const;
  float* base_;
  int layers_, experts_, microbatches_;
};

}  // namespace rp::engine
