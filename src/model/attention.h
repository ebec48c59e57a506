// Causal attention over packed documents without a [T, T] mask (docs/model.md, "Attention over packed
// documents"). A packed row holds several documents and each attends only to itself, so attention is a set
// of variable-length causal problems: the documents' offsets, known on the host when the microbatch is built,
// choose the kernel — batched causal SDPA where every row is one document, ATen's variable-length flash kernel
// on CUDA in half precision, causal SDPA per document elsewhere (cost and memory sum over the documents'
// L², not T²), per-document math attention with an [L, L] mask for GPT-OSS's sinks and Gemma 2's soft-capped
// scores on full layers, and on
// sliding layers (without the flash kernel) math attention in blocks of queries, O(L · window) — a window at
// least as long as the longest document is no window at all.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace rp::model {

// Where a microbatch's documents lie in its B x T tokens, flattened row-major. Documents never cross rows.
struct Documents {
  std::vector<std::int64_t> offsets;  // 0, end of the first document, ..., B * T (host)
  std::int64_t seqLen = 0;            // T
  std::int64_t longest = 0;           // the longest document's length
  torch::Tensor cumulative;           // `offsets` as int32 on the compute device: the varlen kernels' cu_seqlens

  // From [B, T] segment ids (a new document wherever the id changes along a row; undefined = one per row).
  static Documents of(const torch::Tensor& segmentIds, std::int64_t rows, std::int64_t seqLen);
  std::int64_t count() const { return static_cast<std::int64_t>(offsets.size()) - 1; }
  // Every row ends a document, so as many documents as rows means one per row.
  bool onePerRow() const { return count() * seqLen == offsets.back(); }
};

struct AttendOptions {
  double scale = 1.0;
  std::int64_t window = 0;  // > 0: key j is visible from query i only when i - j < window (sliding layers)
  torch::Tensor sinks;      // GPT-OSS: [heads] logits that join each softmax and attend to nothing
  double softcap = 0.0;     // > 0: scores become softcap * tanh(scores / softcap) before the mask (Gemma 2)
};

// Causal attention of q [B, H, T, D] over k, v [B, Hkv, T, D] (H a multiple of Hkv) within each document.
// Returns [B, T, H, D] (not necessarily contiguous).
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const Documents& documents,
                     const AttendOptions& options);

// Which kernel attend() takes for these inputs, by name ("causal", "varlen_flash", "per_document",
// "per_document_math"): logged by tests and the GPU tier, never used to decide anything else.
const char* attentionKernel(const torch::Tensor& q, const Documents& documents, const AttendOptions& options);

}  // namespace rp::model
