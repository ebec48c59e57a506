#include "model/causal_lm.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "common/parallel.h"
#include "model/libtorch.h"

namespace rp::model {
namespace {

// Note [Parallel random init]: a drawn tensor is cut into chunks of 4 Mi elements, and chunk c of the d-th
// drawn tensor comes from a CPU generator of its own, seeded from (base, d, c) (splitmix64), where base is one
// draw of the global generator (train.seed decides it all). Chunks are drawn on as many threads as LibTorch's
// intra-op setting (train.threads), and the values do not depend on how many there are. One thread drew ~100 M values a
// second, so a 1.7 B model's init took ~17 s before this (docs/gpu.md, "The fourth GPU run").
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void drawNormal(const torch::Tensor& values, double deviation, std::uint64_t base, std::uint64_t drawn) {
  RP_CHECK(values.is_contiguous() && values.device().is_cpu(), "random init draws into contiguous host tensors");
  const torch::Tensor flat = values.view(-1);
  constexpr std::int64_t kChunk = std::int64_t{1} << 22;
  const std::int64_t n = flat.numel(), chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 0) return;
  // Threads of our own (common/parallel.h): at::parallel_for ran these draws on one thread (LibTorch 2.x, measured).
  const auto threads = static_cast<int>(std::clamp<std::int64_t>(at::get_num_threads(), 1, chunks));
  const auto drawChunks = [&](int thread) {
    torch::NoGradGuard noGrad;  // per thread: the parameters are drawn in place
    for (std::int64_t c = thread; c < chunks; c += threads) {
      const at::Generator generator =
          at::make_generator<at::CPUGeneratorImpl>(mix(base ^ mix(drawn ^ mix(static_cast<std::uint64_t>(c)))));
      flat.narrow(0, c * kChunk, std::min(kChunk, n - c * kChunk)).normal_(0.0, deviation, generator);
    }
  };
  parallel::forEachPart(threads, drawChunks);
}

}  // namespace

CausalLM::CausalLM(const ModelConfig& config, torch::ScalarType dtype, bool allocate)
    : CausalLM(config, ParamOptions{dtype, allocate}) {}

CausalLM::CausalLM(const ModelConfig& config, const ParamOptions& options)
    : config_(config),
      dtype_(options.dtype),
      allocated_(options.allocate),
      placeholderDevice_(options.placeholderDevice),
      rotary_(config) {
  embedding_ = register_module("embed_tokens", std::make_shared<Embedding>(config, options));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.numLayers; ++i) {
    layers_.push_back(std::make_shared<DecoderLayer>(config, i, options));
    list->push_back(layers_.back());
  }
  head_ = register_module("head", std::make_shared<Head>(config, *embedding_, options));
  for (const auto& layer : layers_) {
    for (const char* target : {"q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up", "in_proj_qkv", "in_proj_z",
                               "in_proj_b", "in_proj_a", "out_proj"}) {
      const Projection* p = layer->projection(target);
      if (p != nullptr && p->packing()) packed_.emplace(layer->projectionPath(target) + ".weight", *p->packing());
    }
  }
}

const Nf4Packing* CausalLM::packing(const std::string& name) const {
  const auto it = packed_.find(name);
  return it == packed_.end() ? nullptr : &it->second;
}

torch::Tensor CausalLM::hidden(const Batch& batch, RouterStats* router) {
  const AttentionContext ctx = rotary_.context(batch, dtype_);
  torch::Tensor h = embedding_->forward(batch.inputIds);
  for (const auto& layer : layers_) h = layer->forward(h, ctx, router);
  return h;
}

torch::Tensor CausalLM::logits(const Batch& batch) {
  return head_->logits(hidden(batch));
}

LossSum CausalLM::loss(const Batch& batch, std::int64_t chunkTokens) {
  if (!config_.moe.auxLoss()) return head_->loss(hidden(batch), batch.targets, chunkTokens);
  RouterStats router;
  LossSum out = head_->loss(hidden(batch, &router), batch.targets, chunkTokens);
  if (router.rows > 0) out.aux = routerAuxLoss(router, config_.moe);  // else every layer is dense
  return out;
}

std::vector<NamedTensor> CausalLM::hfParameters() const {
  std::vector<NamedTensor> out = embedding_->hfParameters();
  for (const auto& layer : layers_) {
    for (auto& p : layer->hfParameters()) out.push_back(std::move(p));
  }
  for (auto& p : head_->hfParameters()) out.push_back(std::move(p));
  return out;
}

void initRandom(CausalLM& model) {
  torch::NoGradGuard noGrad;
  const double deviation = model.config().initializerRange;
  // Note [Parallel random init]: one draw of the global generator seeds every tensor's chunks.
  const auto base = static_cast<std::uint64_t>(
      torch::randint(std::numeric_limits<std::int64_t>::max(), {1}, torch::kLong).item<std::int64_t>());
  std::uint64_t drawnTensors = 0;
  for (auto& [name, param] : model.hfParameters()) {
    // As transformers' _init_weights: GPT-OSS's sinks and router bias are drawn, other biases start at zero.
    const bool drawn = name.ends_with("sinks") || name.ends_with("router.bias");
    if (const Nf4Packing* packing = model.packing(name)) {  // a 1-D buffer, drawn as its weight
      const auto values = torch::empty(packing->shape, model.dtype());
      drawNormal(values, deviation, base, drawnTensors++);
      packNf4(quantizeNf4(values, packing->doubleQuant), *packing, param);
    } else if (name.ends_with("A_log")) {  // Qwen3.5: log of a uniform draw in [0.01, 16], as transformers
      param.copy_(torch::empty(param.sizes(), torch::kFloat).uniform_(0.01, 16.0).log_());
    } else if (name.ends_with("dt_bias")) {
      param.fill_(1.0);
    } else if (param.dim() == 1 && name.find("norm") != std::string::npos) {
      // Ones, or zeros where the norm multiplies by (1 + w) (NormStyle::kGemma; Qwen3.5's gated norm is plain).
      const bool offset = model.config().normStyle == NormStyle::kGemma && !name.ends_with("linear_attn.norm.weight");
      param.fill_(offset ? 0.0 : 1.0);
    } else if (!drawn && (param.dim() == 1 || name.ends_with("bias"))) {
      param.zero_();  // biases
    } else {
      drawNormal(param, deviation, base, drawnTensors++);
    }
  }
}

std::shared_ptr<CausalLM> loadHfModel(const std::string& directory, torch::ScalarType dtype) {
  auto model = std::make_shared<CausalLM>(loadModelConfig(directory), dtype);
  loadHfWeights(*model, directory);
  return model;
}

}  // namespace rp::model
