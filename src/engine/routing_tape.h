// Note [Routing tape]: a backward stage recomputes its layers' forward from the saved stage input; for a MoE
// layer that includes the router's top-k choice, which a second pass on a GPU need not reproduce bit for bit
// (reduction order, ties), and which costs a device-to-host read of the per-expert counts to slice the
// experts' tokens. So forward stages write each sparse layer's choice (the experts of every token, int32, and
// the tokens per expert) to the node store, and the recompute replays it (model::ExpertChoice): the backward
// differentiates exactly the routing the forward used, and the counts come from host memory. The fused stage
// runs forward and backward in one graph and needs none. One tape per loss buffer, like the router
// statistics (engine/router_board.h); internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/layers.h"

namespace rp::engine {

class RoutingTape {
 public:
  static std::size_t regionBytes(int microbatches, int layers, std::int64_t tokens, int topK, int experts);
  // `region`: regionBytes(...) of node-store memory.
  RoutingTape(std::uint8_t* region, int microbatches, int layers, std::int64_t tokens, int topK, int experts);

  // Layer `layer`'s choice for microbatch `mb` (experts [tokens, topK], counts [experts]).
  void put(int mb, int layer, const model::ExpertChoice& choice);
  // The recorded choice, as CPU tensors over the store (valid while the region is not rewritten).
  model::ExpertChoice get(int mb, int layer) const;

 private:
  std::uint8_t* slot(int mb, int layer) const;
  std::uint8_t* base_;
  int microbatches_, layers_, topK_, experts_;
  std::int64_t tokens_;
};

}  // namespace rp::engine
