#include "model/attention.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <ATen/record_function.h>

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::model {

Documents Documents::of(const torch::Tensor& segmentIds, std::int64_t rows, std::int64_t seqLen) {
  RP_CHECK(rows > 0 && seqLen > 0, "a microbatch of {} x {} tokens", rows, seqLen);
  Documents d;
  d.seqLen = seqLen;
  d.offsets.reserve(static_cast<std::size_t>(rows) + 1);
  d.offsets.push_back(0);
  if (segmentIds.defined()) {
    RP_CHECK(segmentIds.dim() == 2 && segmentIds.size(0) == rows && segmentIds.size(1) == seqLen,
             "segment ids of shape {} for a {} x {} microbatch", segmentIds.sizes(), rows, seqLen);
    const auto ids = segmentIds.to(torch::kCPU, torch::kInt64).contiguous();
    const auto* p = ids.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t t = 1; t < seqLen; ++t) {
        if (p[r * seqLen + t] != p[r * seqLen + t - 1]) d.offsets.push_back(r * seqLen + t);
      }
      d.offsets.push_back((r + 1) * seqLen);
    }
  } else {
    for (std::int64_t r = 1; r <= rows; ++r) d.offsets.push_back(r * seqLen);
  }
  for (std::size_t i = 1; i < d.offsets.size(); ++i) d.longest = std::max(d.longest, d.offsets[i] - d.offsets[i - 1]);
  RP_CHECK(d.offsets.back() <= std::numeric_limits<std::int32_t>::max(), "{} tokens in one microbatch exceed int32",
           d.offsets.back());
  d.cumulative = torch::tensor(std::vector<std::int32_t>(d.offsets.begin(), d.offsets.end()), torch::kInt32);
  return d;
}

namespace {

// What no SDPA or flash kernel computes: GPT-OSS's sinks, Gemma 2's soft-capped scores.
bool eager(const AttendOptions& o) {
  return o.sinks.defined() || o.softcap > 0;
}

// A window no shorter than the longest document hides no key (i - j < L <= window): full causal attention.
AttendOptions effective(const AttendOptions& o, const Documents& documents) {
  if (o.window == 0 || documents.longest > o.window) return o;
  AttendOptions full = o;
  full.window = 0;
  return full;
}

enum class Kernel { kCausal, kVarlenFlash, kPerDocument, kPerDocumentWindowed, kPerDocumentMath, kMetaFlash };

Kernel kernelFor(const torch::Tensor& q, const Documents& documents, const AttendOptions& o) {
  if (eager(o)) return Kernel::kPerDocumentMath;
  const auto dtype = q.scalar_type();
  const bool flashable = q.is_cuda() && (dtype == torch::kBFloat16 || dtype == torch::kHalf) && q.size(3) % 8 == 0 &&
                         q.size(3) <= 256;
  // The emulated device (docs/emulated.md) computes nothing: the flash kernel a GPU runs, as shapes (metaFlash).
  if (q.is_meta()) return Kernel::kMetaFlash;
  if (documents.onePerRow() && o.window == 0) return Kernel::kCausal;
  if (flashable) return Kernel::kVarlenFlash;
  return o.window > 0 ? Kernel::kPerDocumentWindowed : Kernel::kPerDocument;
}

// ATen's variable-length flash kernel (FlashAttention-2; grouped-query heads natively): the tokens flattened to
// [B*T, heads, D], one causal problem per cu_seqlens interval.
torch::Tensor varlenFlash(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const Documents& d,
                          const AttendOptions& o) {
  const auto B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1);
  RP_CHECK(d.cumulative.defined() && d.cumulative.device() == q.device(),
           "the documents' offsets must be on {} for the varlen kernel (model::toDevice)", q.device().str());
  const auto flat = [&](const torch::Tensor& x, std::int64_t heads) {
    return x.transpose(1, 2).reshape({B * T, heads, D});
  };
  std::optional<std::int64_t> left, right;
  if (o.window > 0) {
    left = o.window - 1;
    right = 0;
  }
  const auto out = std::get<0>(at::_flash_attention_forward(flat(q, H), flat(k, Hkv), flat(v, Hkv), d.cumulative,
                                                            d.cumulative, d.longest, d.longest, /*dropout_p=*/0.0,
                                                            /*is_causal=*/true, /*return_debug_mask=*/false, o.scale,
                                                            left, right));
  return out.view({B, T, H, D});
}

// Which keys of [Lk] each query of [Lq] sees, query a at position a + shift of the keys': causal and, with a window,
// transformers' sliding_window_overlay (key j is visible from query i when j > i - window).
torch::Tensor visible(std::int64_t Lq, std::int64_t Lk, std::int64_t shift, std::int64_t window,
                      const torch::Device& device) {
  const auto like = torch::TensorOptions().dtype(torch::kBool).device(device);
  auto allowed = torch::ones({Lq, Lk}, like).tril(shift);
  if (window > 0) allowed = allowed.logical_and(torch::ones({Lq, Lk}, like).triu(shift - window + 1));
  return allowed;
}

// Eager attention of queries [1, H, Lq, D] against keys and values [1, Hkv, Lk, D] of one document, query a at
// position a + shift of the keys', with the causal (and window) mask and GPT-OSS's sinks, as transformers'
// eager_attention_forward computes it.
torch::Tensor documentMath(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const AttendOptions& o, std::int64_t shift = 0) {
  const auto H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  const auto groups = H / k.size(1);
  const auto keys = groups == 1 ? k : k.repeat_interleave(groups, 1);
  const auto values = groups == 1 ? v : v.repeat_interleave(groups, 1);
  const auto allowed = visible(Lq, Lk, shift, o.window, q.device());
  auto scores = torch::matmul(q, keys.transpose(2, 3)) * o.scale;
  if (o.softcap > 0) scores = torch::tanh(scores / o.softcap) * o.softcap;  // before the mask, as transformers
  scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
  if (!o.sinks.defined()) return torch::matmul(torch::softmax(scores, -1), values);
  auto logits = torch::cat({scores, o.sinks.view({1, -1, 1, 1}).expand({1, H, Lq, 1}).to(scores.scalar_type())}, -1);
  logits = logits - std::get<0>(logits.max(-1, /*keepdim=*/true));
  const auto probs = torch::softmax(logits, -1).narrow(-1, 0, Lk);  // the sink's share attends to nothing
  return torch::matmul(probs, values);
}

// Queries per block of windowed(): small enough that a block's scores stay near the window's size, large enough
// that the blocks' matmuls are not dominated by their calls.
constexpr std::int64_t kWindowBlock = 256;

// A sliding layer's attention over one document longer than its window, never its [L, L] scores: the first
// `window` queries see every key before them (causal attention), and each later block of queries from s sees
// keys from s - window + 1 on. Without sinks those blocks are SDPA with an additive mask (ATen's CPU flash kernel
// takes masks and keeps O(Lq) for the backward besides the mask), and every full block has the same mask: one
// tensor serves them all. With sinks or soft-capping, the eager math in the same blocks.
torch::Tensor windowed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttendOptions& o) {
  const auto L = q.size(2), w = o.window, block = std::min(w, kWindowBlock);
  const bool gqa = q.size(1) != k.size(1);
  const auto additive = [&](std::int64_t Lq) {
    return torch::zeros({Lq, Lq + w - 1}, q.options().requires_grad(false))
        .masked_fill(visible(Lq, Lq + w - 1, w - 1, w, q.device()).logical_not(), -INFINITY);
  };
  const bool math = eager(o);
  std::vector<torch::Tensor> parts;
  if (math) {
    parts.push_back(documentMath(q.narrow(2, 0, w), k.narrow(2, 0, w), v.narrow(2, 0, w), o));
  } else {
    parts.push_back(at::scaled_dot_product_attention(q.narrow(2, 0, w), k.narrow(2, 0, w), v.narrow(2, 0, w), {}, 0.0,
                                                     /*is_causal=*/true, o.scale, gqa));
  }
  const torch::Tensor full = math || L - w < block ? torch::Tensor() : additive(block);
  for (std::int64_t s = w; s < L; s += block) {
    const auto Lq = std::min(L - s, block), first = s - w + 1;
    const auto qb = q.narrow(2, s, Lq), kb = k.narrow(2, first, Lq + w - 1), vb = v.narrow(2, first, Lq + w - 1);
    if (math) {
      parts.push_back(documentMath(qb, kb, vb, o, w - 1));
    } else {
      parts.push_back(at::scaled_dot_product_attention(qb, kb, vb, Lq == block ? full : additive(Lq), 0.0,
                                                       /*is_causal=*/false, o.scale, gqa));
    }
  }
  return torch::cat(parts, 2);
}

// The emulated device's attention: the flash kernel's shapes and what it keeps for the backward — its output and
// a float log-sum-exp per query and head, O(T), never the T x T scores SDPA's math path saves — as meta tensors,
// one call forward and one backward, as the varlen kernel over the packed documents on a GPU: each a named region
// that the emulated device counts as the one kernel it stands for (Note [Kernel counts], engine/kernel_count.h).
struct MetaFlash : torch::autograd::Function<MetaFlash> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) {
    RECORD_FUNCTION("rp::meta_flash_forward", std::vector<c10::IValue>());
    torch::Tensor out = torch::empty_like(q);
    const torch::Tensor lse = torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(torch::kFloat));
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    RECORD_FUNCTION("rp::meta_flash_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    return {torch::empty_like(saved[0]), torch::empty_like(saved[1]), torch::empty_like(saved[2])};
  }
};

// One call per document: causal SDPA (a flash kernel where the backend has one) or documentMath; windowed() for a
// document longer than the window.
torch::Tensor perDocument(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const Documents& d,
                          const AttendOptions& o, bool math) {
  const auto T = q.size(2);
  const bool gqa = q.size(1) != k.size(1);
  std::vector<torch::Tensor> rows, parts;
  for (std::size_t i = 0; i + 1 < d.offsets.size(); ++i) {
    const auto row = d.offsets[i] / T, start = d.offsets[i] % T, length = d.offsets[i + 1] - d.offsets[i];
    const auto slice = [&](const torch::Tensor& x) { return x.narrow(0, row, 1).narrow(2, start, length); };
    if (o.window > 0 && length > o.window) {
      parts.push_back(windowed(slice(q), slice(k), slice(v), o));
    } else if (math) {
      parts.push_back(documentMath(slice(q), slice(k), slice(v), o));
    } else {
      parts.push_back(
          at::scaled_dot_product_attention(slice(q), slice(k), slice(v), {}, 0.0, /*is_causal=*/true, o.scale, gqa));
    }
    if (start + length == T) {
      rows.push_back(parts.size() == 1 ? parts.front() : torch::cat(parts, 2));
      parts.clear();
    }
  }
  return (rows.size() == 1 ? rows.front() : torch::cat(rows, 0)).transpose(1, 2);
}

}  // namespace

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const Documents& documents,
                     const AttendOptions& requested) {
  const AttendOptions options = effective(requested, documents);
  RP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) % k.size(1) == 0,
           "attend: q [B, H, T, D] and k, v [B, Hkv, T, D] with H a multiple of Hkv; got {}, {}, {}", q.sizes(),
           k.sizes(), v.sizes());
  RP_CHECK(documents.offsets.size() >= 2 && documents.offsets.back() == q.size(0) * q.size(2),
           "attend: documents cover {} tokens, the microbatch has {}", documents.offsets.back(), q.size(0) * q.size(2));
  switch (kernelFor(q, documents, options)) {
    case Kernel::kCausal:
      return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, options.scale,
                                              q.size(1) != k.size(1))
          .transpose(1, 2);
    case Kernel::kVarlenFlash:
      return varlenFlash(q, k, v, documents, options);
    case Kernel::kPerDocument:
    case Kernel::kPerDocumentWindowed:
      return perDocument(q, k, v, documents, options, /*math=*/false);
    case Kernel::kPerDocumentMath:
      return perDocument(q, k, v, documents, options, /*math=*/true);
    case Kernel::kMetaFlash:
      return MetaFlash::apply(q, k, v).transpose(1, 2);
  }
  RP_THROW(InternalError, "attend: unknown kernel");
}

const char* attentionKernel(const torch::Tensor& q, const Documents& documents, const AttendOptions& options) {
  switch (kernelFor(q, documents, effective(options, documents))) {
    case Kernel::kCausal:
      return "causal";
    case Kernel::kVarlenFlash:
      return "varlen_flash";
    case Kernel::kPerDocument:
      return "per_document";
    case Kernel::kPerDocumentWindowed:
      return "per_document_windowed";
    case Kernel::kPerDocumentMath:
      return "per_document_math";
    case Kernel::kMetaFlash:
      return "meta_flash";
  }
  return "unknown";
}

}  // namespace rp::model
