// Forward and forward+backward time of one decoder layer and of the LM head with loss, on CPU, for a
// small and a mid-size shape. Reports tokens/s and achieved GFLOP/s (counter "GFLOPs") so the numbers
// can be set against the machine's matmul peak (BM_MatmulPeak) and against transformers on the same shapes
// (benchmarks/peer_hf_layers.py). docs/benchmarks.md has the numbers and commands.
#include <benchmark/benchmark.h>

#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "model/nf4.h"

namespace {

using rp::model::ModelConfig;

ModelConfig shape(std::int64_t hidden, std::int64_t heads, std::int64_t kvHeads, std::int64_t intermediate,
                  std::int64_t vocab) {
  ModelConfig c;
  c.vocabSize = vocab;
  c.hiddenSize = hidden;
  c.intermediateSize = intermediate;
  c.numLayers = 1;
  c.numHeads = heads;
  c.numKvHeads = kvHeads;
  c.headDim = hidden / heads;
  c.maxPositions = 4096;
  return c;
}

ModelConfig configFor(std::int64_t which) {
  return which == 0 ? shape(128, 8, 4, 384, 2048)       // TinyStories-656K
                    : shape(1024, 16, 8, 3072, 32000);  // a 0.5B-class layer
}

// Matmul FLOPs of one decoder layer forward per token (projections + attention scores/values).
double layerFlopsPerToken(const ModelConfig& c, std::int64_t seq) {
  const double h = static_cast<double>(c.hiddenSize), i = static_cast<double>(c.intermediateSize);
  const double kv = static_cast<double>(c.numKvHeads * c.headDim);
  const double proj = 2.0 * h * (h + 2 * kv + h) + 2.0 * 3 * h * i;
  const double attn = 2.0 * 2 * static_cast<double>(seq) * h / 2;  // causal: half the square on average
  return proj + attn;
}

void setInit(rp::model::CausalLM& model) {
  torch::NoGradGuard noGrad;
  for (auto& [name, p] : model.hfParameters()) {
    if (p.dim() == 1)
      p.fill_(1.0);
    else
      p.normal_(0.0, 0.02);
  }
}

void BM_DecoderLayer(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto c = configFor(state.range(0));
  const std::int64_t seq = state.range(1);
  const bool backward = state.range(2) != 0;
  const bool nf4 = state.range(3) != 0;  // QLoRA's packed NF4 projections, dequantized per product
  rp::model::CausalLM model(c, rp::model::ParamOptions{torch::kFloat, true, nf4, false});
  if (nf4) {
    rp::model::initRandom(model);
  } else {
    setInit(model);
  }
  const auto batch = rp::model::causalBatch(torch::randint(c.vocabSize, {1, seq}, torch::kInt64));
  const auto ctx = model.rotary().context(batch, torch::kFloat);
  auto input = torch::randn({1, seq, c.hiddenSize}).requires_grad_(backward);
  for (auto _ : state) {
    auto out = model.decoderLayer(0).forward(input, ctx);
    if (backward) out.sum().backward();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  const double tokens = static_cast<double>(seq) * static_cast<double>(state.iterations());
  const double flops = layerFlopsPerToken(c, seq) * (backward ? 3.0 : 1.0) * tokens;
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecoderLayer)
    ->ArgNames({"cfg", "seq", "bwd", "nf4"})
    ->ArgsProduct({{0, 1}, {256}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

void BM_HeadLoss(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto c = configFor(state.range(0));
  const std::int64_t seq = 256;
  rp::model::CausalLM model(c, torch::kFloat);
  setInit(model);
  auto hidden = torch::randn({1, seq, c.hiddenSize}).requires_grad_(true);
  const auto targets = torch::randint(c.vocabSize, {1, seq}, torch::kInt64);
  for (auto _ : state) {
    auto loss = model.head().loss(hidden, targets, state.range(1));
    loss.sum.backward();
    benchmark::DoNotOptimize(loss.sum.data_ptr());
  }
  const double tokens = static_cast<double>(seq) * static_cast<double>(state.iterations());
  const double flops = 3.0 * 2.0 * static_cast<double>(c.hiddenSize * c.vocabSize) * tokens;
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HeadLoss)->ArgNames({"cfg", "chunk"})->ArgsProduct({{0, 1}, {0, 64}})->Unit(benchmark::kMillisecond);

// NF4 dequantisation of one Qwen3-1.7B MLP projection ([6144, 2048], packed; double quantisation by the
// argument) into float32, on one thread, against its limit: writing as many float32 values (BM_FillFloats).
void BM_DequantizeNf4(benchmark::State& state) {
  torch::set_num_threads(1);
  const rp::model::Nf4Packing packing{{6144, 2048}, state.range(0) != 0};
  auto packed = torch::empty({packing.bytes()}, torch::kUInt8);
  rp::model::packNf4(rp::model::quantizeNf4(torch::randn({6144, 2048}), packing.doubleQuant), packing, packed);
  for (auto _ : state) benchmark::DoNotOptimize(rp::model::dequantizePacked(packed, packing).data_ptr());
  const double values = static_cast<double>(packing.numel()) * static_cast<double>(state.iterations());
  state.counters["Gvalues/s"] = benchmark::Counter(values / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DequantizeNf4)->ArgNames({"double"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_FillFloats(benchmark::State& state) {
  torch::set_num_threads(1);
  for (auto _ : state) benchmark::DoNotOptimize(torch::full({6144, 2048}, 1.5F).data_ptr());
  const double values = 6144.0 * 2048.0 * static_cast<double>(state.iterations());
  state.counters["Gvalues/s"] = benchmark::Counter(values / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FillFloats)->Unit(benchmark::kMillisecond);

// The hardware limit the layers are measured against: a large fp32 matmul on one thread.
void BM_MatmulPeak(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto n = state.range(0);
  const auto a = torch::randn({n, n}), b = torch::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(torch::mm(a, b).data_ptr());
  const double flops = 2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulPeak)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
