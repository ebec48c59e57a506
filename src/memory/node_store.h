// The node-shared host store: one shared-memory segment per node, mapped by every rank of the node, holding
// named regions (weights, gradient slots, the activation arena, losses). The layout is computed identically
// on every rank from the same inputs, so a region is found by name and never sent over the wire.
// Thread-safety: the mapping is shared; who writes which bytes when is the engine's protocol (docs/schedule.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <mpi.h>

#include "memory/shm_segment.h"

namespace rp::memory {

class StoreLayout {
 public:
  // Adds a region of `bytes` (64-byte aligned); names are unique.
  std::size_t add(const std::string& name, std::size_t bytes);
  std::size_t offset(const std::string& name) const;
  std::size_t bytes(const std::string& name) const;
  bool has(const std::string& name) const { return regions_.count(name) != 0; }
  std::size_t total() const { return total_; }

 private:
  struct Region {
    std::size_t offset, bytes;
  };
  std::map<std::string, Region> regions_;
  std::size_t total_ = 0;
};

class NodeStore {
 public:
  // Collective over `nodeComm`: local rank 0 creates the segment, every rank maps it, then the name is
  // unlinked (Note [Shm lifetime]).
  NodeStore(StoreLayout layout, MPI_Comm nodeComm, const std::string& tag);

  float* floats(const std::string& name) const;
  double* doubles(const std::string& name) const;
  std::uint8_t* bytes(const std::string& name) const;
  const StoreLayout& layout() const { return layout_; }
  const std::string& segmentName() const { return segment_.name(); }

 private:
  StoreLayout layout_;
  ShmSegment segment_;
};

}  // namespace rp::memory
