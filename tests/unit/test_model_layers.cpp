// Properties of the layer-list model that hold for any weights: parameter naming, tied heads,
// chunked loss, packed-sequence isolation. Parity with transformers is in tests/golden/.
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <utility>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/resident_memory.h"
#include "model/causal_lm.h"
#include "model/generate.h"
#include "model/libtorch.h"
#include "model/linear_cross_entropy.h"
#include "model/lora.h"
#include "model/nf4.h"
#include "schedule/projection.h"
#include "support/sanitizers.h"

namespace rp::model {
namespace {

ModelConfig tinyConfig(Architecture arch, bool tied) {
  ModelConfig c;
  c.arch = arch;
  c.qkNorm = arch == Architecture::kQwen3;
  c.vocabSize = 97;
  c.hiddenSize = 32;
  c.intermediateSize = 48;
  c.numLayers = 2;
  c.numHeads = 4;
  c.numKvHeads = 2;
  c.headDim = arch == Architecture::kQwen3 ? 16 : 8;
  c.maxPositions = 64;
  c.tieWordEmbeddings = tied;
  return c;
}

void randomize(CausalLM& model, int seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard noGrad;
  for (auto& [name, p] : model.hfParameters()) {
    if (p.dim() == 1)
      p.copy_(1.0 + 0.2 * torch::randn(p.sizes()));
    else
      p.copy_(0.1 * torch::randn(p.sizes()));
  }
}

TEST(ModelLayers, HfNamesAreUniqueAndCoverEveryParameter) {
  CausalLM model(tinyConfig(Architecture::kQwen3, /*tied=*/true), torch::kFloat);
  std::set<std::string> names;
  for (const auto& [name, p] : model.hfParameters()) EXPECT_TRUE(names.insert(name).second) << name;
  EXPECT_EQ(names.size(), model.parameters().size());
  EXPECT_TRUE(names.count("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_TRUE(names.count("model.embed_tokens.weight"));
  EXPECT_FALSE(names.count("lm_head.weight"));  // tied: the embedding owns it

  CausalLM untied(tinyConfig(Architecture::kLlama, /*tied=*/false), torch::kFloat);
  std::set<std::string> untiedNames;
  for (const auto& [name, p] : untied.hfParameters()) untiedNames.insert(name);
  EXPECT_TRUE(untiedNames.count("lm_head.weight"));
  EXPECT_FALSE(untiedNames.count("model.layers.0.self_attn.q_norm.weight"));
}

// Note [Parallel random init]: the values depend on train.seed alone, not on the intra-op threads; every
// drawn tensor and every 4 Mi-element chunk of one has its own stream; norms start at 1 and the draws have the
// configured deviation.
TEST(ModelLayers, RandomInitIsTheSameOnAnyThreadCountAndDrawsFreshValuesPerChunk) {
  ModelConfig c = tinyConfig(Architecture::kQwen3, /*tied=*/false);
  c.vocabSize = 9000;
  c.hiddenSize = 1024;  // the embedding and the head: 9.2 M elements, three chunks each
  c.intermediateSize = 64;
  c.numLayers = 1;
  c.initializerRange = 0.02;
  const int threads = at::get_num_threads();
  auto drawn = [&](int n) {
    at::set_num_threads(n);
    torch::manual_seed(7);
    auto model = std::make_shared<CausalLM>(c, torch::kFloat);
    initRandom(*model);
    return model;
  };
  const auto one = drawn(1), two = drawn(2);
  at::set_num_threads(threads);
  const auto a = one->hfParameters(), b = two->hfParameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  std::map<std::string, torch::Tensor> byName(a.begin(), a.end());
  const torch::Tensor embed = byName.at("model.embed_tokens.weight").view(-1),
                      head = byName.at("lm_head.weight").view(-1);
  EXPECT_NEAR(embed.std().item<double>(), 0.02, 2e-4);
  EXPECT_NEAR(embed.mean().item<double>(), 0.0, 2e-4);
  const std::int64_t chunk = std::int64_t{1} << 22;
  EXPECT_FALSE(torch::equal(embed.narrow(0, 0, 1000), embed.narrow(0, chunk, 1000)));  // chunks differ
  EXPECT_FALSE(torch::equal(embed.narrow(0, 0, 1000), head.narrow(0, 0, 1000)));       // tensors differ
  EXPECT_TRUE(torch::equal(byName.at("model.norm.weight"), torch::ones({c.hiddenSize})));
  torch::manual_seed(8);
  auto other = std::make_shared<CausalLM>(c, torch::kFloat);
  initRandom(*other);
  EXPECT_FALSE(torch::equal(other->hfParameters().front().second, a.front().second));  // the seed decides
}

// Qwen3.5 (three Gated DeltaNet layers to one full) as transformers' _init_weights starts it: (1 + w) norms at zero,
// the gated norm inside linear attention at one, dt_bias at one, A_log the log of a draw in [0.01, 16]. Its
// ModelShape counts exactly the matmul parameters the layers hold (the simulator's and planner's weights).
TEST(ModelLayers, Qwen35StartsAsTransformersAndItsShapeCountsItsParameters) {
  const ModelConfig c = parseModelConfig({{"model_type", "qwen3_5_text"},
                                          {"vocab_size", 97},
                                          {"hidden_size", 32},
                                          {"intermediate_size", 48},
                                          {"num_hidden_layers", 4},
                                          {"num_attention_heads", 4},
                                          {"num_key_value_heads", 2},
                                          {"head_dim", 8},
                                          {"linear_key_head_dim", 8},
                                          {"linear_value_head_dim", 8},
                                          {"linear_num_key_heads", 2},
                                          {"linear_num_value_heads", 4}},
                                         "cfg.json");
  torch::manual_seed(3);
  CausalLM model(c, torch::kFloat);
  initRandom(model);
  double matmul = 0.0;
  for (const auto& [name, p] : model.hfParameters()) {
    if (name.ends_with("linear_attn.norm.weight") || name.ends_with("dt_bias")) {
      EXPECT_TRUE(torch::equal(p, torch::ones_like(p))) << name;
    } else if (name.ends_with("A_log")) {
      EXPECT_GE(p.min().item<double>(), std::log(0.01)) << name;
      EXPECT_LE(p.max().item<double>(), std::log(16.0)) << name;
    } else if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::equal(p, torch::zeros_like(p))) << name << ": (1 + w) starts at w = 0";
    }
    if (nf4Linear(name) || name.ends_with("embed_tokens.weight") || name == "lm_head.weight") {
      matmul += static_cast<double>(p.numel());
    }
  }
  EXPECT_EQ(schedule::shapeOf(c).params(), matmul);
}

// A tied head must use the embedding matrix and send it the gradient of both uses: exactly the sum of
// an untied model's embedding and head gradients when the two matrices hold the same values.
TEST(ModelLayers, TiedHeadGradientIsSumOfBothUses) {
  CausalLM tied(tinyConfig(Architecture::kLlama, true), torch::kFloat);
  CausalLM untied(tinyConfig(Architecture::kLlama, false), torch::kFloat);
  randomize(tied, 3);
  {
    torch::NoGradGuard noGrad;
    auto src = tied.hfParameters();
    for (auto& [name, p] : untied.hfParameters()) {
      const std::string from = name == "lm_head.weight" ? "model.embed_tokens.weight" : name;
      for (auto& [n, q] : src) {
        if (n == from) p.copy_(q);
      }
    }
  }
  const auto batch = causalBatch(torch::randint(97, {2, 12}, torch::kInt64));
  auto lt = tied.loss(batch);
  auto lu = untied.loss(batch);
  EXPECT_TRUE(torch::allclose(lt.sum, lu.sum, 1e-6, 1e-6));
  lt.sum.backward();
  lu.sum.backward();
  torch::Tensor embedGrad, headGrad, tiedGrad;
  for (auto& [n, p] : untied.hfParameters()) {
    if (n == "model.embed_tokens.weight") embedGrad = p.grad();
    if (n == "lm_head.weight") headGrad = p.grad();
  }
  for (auto& [n, p] : tied.hfParameters()) {
    if (n == "model.embed_tokens.weight") tiedGrad = p.grad();
  }
  EXPECT_TRUE(torch::allclose(tiedGrad, embedGrad + headGrad, 1e-5, 1e-6));
}

// The streamed loss against plain autograd over the full logits (linear, float32 cross-entropy): the same
// loss and the same gradients for the hidden states and the head weight, whatever the chunking; also with the
// logits divided (Granite's logits_scaling).
TEST(ModelLayers, StreamedLossEqualsPlainCrossEntropyAndGradients) {
  for (const auto& [dtype, scaling] : {std::pair{torch::kFloat, 1.0}, std::pair{torch::kBFloat16, 1.0},
                                       std::pair{torch::kFloat, 3.0}, std::pair{torch::kBFloat16, 3.0}}) {
    ModelConfig config = tinyConfig(Architecture::kQwen3, false);
    config.logitsScaling = scaling;
    CausalLM model(config, dtype);
    randomize(model, 5);
    auto batch = causalBatch(torch::randint(97, {2, 15}, torch::kInt64));
    batch.targets.index_put_({0, 3}, kIgnoreIndex);
    torch::Tensor head;
    for (auto& [n, p] : model.hfParameters()) {
      if (n == "lm_head.weight") head = p;
    }
    const auto hidden = model.hidden(batch).detach().requires_grad_(true);
    const auto plain = torch::nn::functional::cross_entropy(
        model.head().logits(hidden).reshape({-1, 97}).to(torch::kFloat), batch.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
    const auto plainGrads = torch::autograd::grad({plain * 0.37}, {hidden, head});
    // bf16: the plain path rounds the scaled logit gradient, the streamed one the unscaled and it sums the
    // head weight's gradient over chunks in bf16 — a few roundings apart, so compared as a relative norm.
    const double tol = dtype == torch::kFloat ? 1e-6 : 1e-2;
    auto relative = [](const torch::Tensor& a, const torch::Tensor& b) {
      const auto fa = a.to(torch::kFloat), fb = b.to(torch::kFloat);
      return ((fa - fb).norm() / fb.norm()).item<double>();
    };
    for (const std::int64_t chunk : {0, 1, 7, 30, 1000}) {
      const auto streamed = model.head().loss(hidden, batch.targets, chunk);
      EXPECT_TRUE(torch::allclose(streamed.sum, plain, 1e-6, 1e-5)) << chunk << " " << dtype << " / " << scaling;
      const auto grads = torch::autograd::grad({streamed.sum * 0.37}, {hidden, head});
      EXPECT_LE(relative(grads[0], plainGrads[0]), tol) << "hidden, chunk " << chunk << " " << dtype;
      EXPECT_LE(relative(grads[1], plainGrads[1]), tol) << "head weight, chunk " << chunk << " " << dtype;
    }
  }
}

// Forward and backward of the loss hold one chunk of logits at a time: the resident peak of a streamed
// loss stays within a few chunks' logits, while one chunk over every token costs the full [tokens, vocab].
TEST(ModelLayers, StreamedLossPeakIsBoundedByOneChunk) {
  if (!resetResidentPeak()) GTEST_SKIP() << "the kernel does not let this process reset its resident peak";
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "under ASan, freed memory stays resident (quarantine): no peak to measure";
  torch::manual_seed(11);
  const std::int64_t tokens = 2048, hidden = 64, vocab = 32000, chunk = 128;
  const auto weight = (0.05 * torch::randn({vocab, hidden})).requires_grad_(true);
  const auto targets = torch::randint(vocab, {tokens}, torch::kInt64);
  auto peakOf = [&](std::int64_t rows) {
    const auto h = torch::randn({tokens, hidden}).requires_grad_(true);
    resetResidentPeak();
    const std::int64_t before = readResidentMemory().bytes;
    linearCrossEntropy(h, weight, targets, rows, kIgnoreIndex).backward();
    const std::int64_t peak = readResidentMemory().peakBytes - before;
    weight.mutable_grad().reset();
    return peak;
  };
  const std::int64_t fullLogits = tokens * vocab * 4, chunkLogits = chunk * vocab * 4;
  const std::int64_t weightBytes = vocab * hidden * 4;
  const std::int64_t whole = peakOf(tokens);
  const std::int64_t streamed = peakOf(chunk);
  EXPECT_GE(whole, fullLogits) << "one chunk over every token holds the full logits";
  EXPECT_LE(streamed, 6 * chunkLogits + 2 * weightBytes + (16 << 20))
      << "streamed peak " << streamed / 1e6 << " MB; one chunk's logits are " << chunkLogits / 1e6 << " MB";
}

// Packed documents with restarted positions and segment ids give each document exactly the logits it
// gets alone: nothing leaks across the boundary.
TEST(ModelLayers, PackedSegmentsEqualSeparateSequences) {
  for (auto arch : {Architecture::kLlama, Architecture::kQwen3}) {
    CausalLM model(tinyConfig(arch, true), torch::kFloat);
    randomize(model, 7);
    torch::NoGradGuard noGrad;
    const auto a = torch::randint(97, {1, 5}, torch::kInt64);
    const auto b = torch::randint(97, {1, 9}, torch::kInt64);
    Batch packed = causalBatch(torch::cat({a, b}, 1));
    packed.positionIds = torch::cat({torch::arange(5), torch::arange(9)}).unsqueeze(0);
    packed.segmentIds = torch::cat({torch::zeros(5, torch::kInt64), torch::ones(9, torch::kInt64)}).unsqueeze(0);
    const auto logits = model.logits(packed);
    const auto la = model.logits(causalBatch(a));
    const auto lb = model.logits(causalBatch(b));
    EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 5), la, 1e-5, 1e-5)) << architectureName(arch);
    EXPECT_TRUE(torch::allclose(logits.narrow(1, 5, 9), lb, 1e-5, 1e-5)) << architectureName(arch);
    // Without segment ids the second document does see the first.
    Batch leaky = packed;
    leaky.segmentIds = torch::Tensor();
    EXPECT_FALSE(torch::allclose(model.logits(leaky).narrow(1, 5, 9), lb, 1e-3, 1e-3));
  }
}

TEST(ModelLayers, DecoderLayersRunOneByOne) {
  CausalLM model(tinyConfig(Architecture::kLlama, false), torch::kFloat);
  randomize(model, 9);
  torch::NoGradGuard noGrad;
  const auto batch = causalBatch(torch::randint(97, {1, 8}, torch::kInt64));
  const auto ctx = model.rotary().context(batch, torch::kFloat);
  auto h = model.embedding().forward(batch.inputIds);
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) h = model.decoderLayer(i).forward(h, ctx);
  EXPECT_TRUE(torch::equal(model.head().logits(h), model.logits(batch)));
}

// The names of the LibTorch operators called while it is alive, on any thread (the backward's included).
class OpRecorder {
 public:
  OpRecorder()
      : handle_(at::addGlobalCallback(
            at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              std::lock_guard<std::mutex> lock(mutex());
              recorded().insert(fn.name());
              return nullptr;
            }).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}))) {
    recorded().clear();
  }
  ~OpRecorder() { at::removeCallback(handle_); }
  std::set<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex());
    return recorded();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::string>& recorded() {
    static std::set<std::string> s;
    return s;
  }
  at::CallbackHandle handle_;
};

// Note [Nothing read back per microbatch]: a pipeline job's path for one microbatch — the context made on the
// host, then embedding, decoder layers, the streamed loss and the backward — calls no operator that reads a
// tensor's value back to the host (item() and bool conversions go through _local_scalar_dense) or whose output
// size depends on values (nonzero, masked_select, unique, bincount, repeat_interleave without a size): on a GPU
// each waits for the compute queued before it. Packed documents (the per-document attention) and one document per
// row (causal attention), both architectures, float32 and bfloat16, full fine-tune and QLoRA. Copies to the host are
// what the GPU tier's synchronisation check adds (test_gpu_attention.cpp): on the CPU they are no copies at all.
TEST(ModelLayers, NothingIsReadBackFromTheDevice) {
  const std::set<std::string> readBack{"aten::_local_scalar_dense",
                                       "aten::item",
                                       "aten::is_nonzero",
                                       "aten::nonzero",
                                       "aten::nonzero_numpy",
                                       "aten::argwhere",
                                       "aten::masked_select",
                                       "aten::_unique",
                                       "aten::_unique2",
                                       "aten::unique_dim",
                                       "aten::unique_consecutive",
                                       "aten::bincount",
                                       "aten::repeat_interleave",
                                       "aten::equal",
                                       "aten::allclose"};
  for (auto arch : {Architecture::kLlama, Architecture::kQwen3}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      for (const bool qlora : {false, true}) {
        // QLoRA: the projections packed NF4 (double-quantised), adapters on all seven.
        CausalLM model(tinyConfig(arch, /*tied=*/arch == Architecture::kQwen3),
                       ParamOptions{dtype, true, qlora, qlora});
        torch::manual_seed(3);
        initRandom(model);
        if (qlora) attachLora(model, LoraConfig{4, 8.0, 0.0, {"q", "k", "v", "o", "gate", "up", "down"}});
        for (const bool packed : {true, false}) {
          Batch batch = causalBatch(torch::randint(97, {2, 14}, torch::kInt64));
          if (packed) {
            batch.positionIds = torch::cat({torch::arange(5), torch::arange(1), torch::arange(8)}).repeat({2, 1});
            batch.segmentIds =
                torch::cat({torch::zeros(5), torch::ones(1), torch::full({8}, 2)}).to(torch::kInt64).repeat({2, 1});
          }
          const auto ctx = model.rotary().context(batch, dtype);  // on the host, before the batch goes to the device
          std::set<std::string> called;
          {
            const OpRecorder recorder;
            auto h = model.embedding().forward(batch.inputIds);
            for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) h = model.decoderLayer(i).forward(h, ctx);
            model.head().loss(h, batch.targets, /*chunkTokens=*/5).sum.backward();
            called = recorder.names();
          }
          const std::string what = fmt::format("{} {}{} packed={}", architectureName(arch), c10::toString(dtype),
                                               qlora ? " QLoRA" : "", packed);
          ASSERT_TRUE(called.count("aten::mm") || called.count("aten::addmm") || called.count("aten::matmul"))
              << what << ": the recorder saw no matrix product";
          for (const auto& name : called) EXPECT_FALSE(readBack.count(name)) << what << " calls " << name;
          model.zero_grad();
        }
      }
    }
  }
}

// Sampling the next token (model/generate.h): greedy is the argmax; top-p keeps the most likely tokens until
// their mass exceeds p — for probabilities 0.5, 0.3, 0.15, 0.05, p = 0.7 keeps the first two, as transformers'
// TopPLogitsWarper does (it drops the tokens whose ascending cumulative mass is <= 1 - p: 0.05 and 0.15), p = 0.5
// keeps one — and draws follow the kept probabilities renormalised, at the temperature's softmax.
// One token through expert e, written out per token (the reference for the grouped dispatch).
torch::Tensor naiveExpert(const SparseMoe& moe, const MoeConfig& c, std::int64_t e, const torch::Tensor& x) {
  if (c.kind == MoeKind::kQwen3) {
    const auto gu = torch::mv(moe.gateUp[e], x);
    const auto I = gu.size(0) / 2;
    return torch::mv(moe.down[e], torch::silu(gu.narrow(0, 0, I)) * gu.narrow(0, I, I));
  }
  const auto gu = torch::mv(moe.gateUp[e].t(), x) + moe.gateUpBias[e];
  const auto I = gu.size(0) / 2;
  const auto gate = gu.view({I, 2}).select(1, 0).clamp_max(c.swigluLimit);
  const auto up = gu.view({I, 2}).select(1, 1).clamp(-c.swigluLimit, c.swigluLimit);
  return torch::mv(moe.down[e].t(), (up + 1) * gate * torch::sigmoid(gate * c.swigluAlpha)) + moe.downBias[e];
}

// Note [Routing tape]: a sparse layer records the experts it chose, replays a recorded choice bitwise, and
// honours a replayed choice that differs from what it would choose (weights from this pass's router).
TEST(ModelLayers, SparseLayersRecordAndReplayTheirRouting) {
  for (const MoeKind kind : {MoeKind::kQwen3, MoeKind::kGptOss}) {
    ModelConfig c = tinyConfig(Architecture::kQwen3Moe, false);
    c.moe.kind = kind;
    c.moe.numExperts = 5;
    c.moe.expertsPerToken = 2;
    c.moe.expertIntermediateSize = 6;
    c.moe.normTopkProb = true;
    c.moe.swigluLimit = 0.3;
    SparseMoe moe(c, {});
    torch::manual_seed(11);
    {
      torch::NoGradGuard noGrad;
      for (auto& [name, p] : moe.hfParameters("")) p.copy_(0.3 * torch::randn(p.sizes()));
    }
    const auto x = torch::randn({2, 5, c.hiddenSize});
    ExpertChoice recorded;
    const auto out = moe.forward(x, nullptr, &recorded);
    ASSERT_EQ(recorded.experts.sizes(), (std::vector<std::int64_t>{10, 2}));
    EXPECT_TRUE(torch::equal(recorded.counts, torch::bincount(recorded.experts.reshape({-1}), {}, 5)));
    ExpertChoice same = recorded;
    EXPECT_TRUE(torch::equal(moe.forward(x, nullptr, &same), out)) << "a replay of the recorded routing";

    // Every token sent to the next experts instead: the output follows the replayed choice.
    ExpertChoice other{(recorded.experts + 1) % 5, {}};
    other.counts = torch::bincount(other.experts.reshape({-1}), {}, 5);
    const auto replayed = moe.forward(x, nullptr, &other).reshape({10, -1});
    const auto flat = x.reshape({10, -1});
    const auto logits = torch::linear(flat, moe.router, moe.routerBias);
    for (std::int64_t t = 0; t < 10; ++t) {
      const auto chosen = other.experts[t];
      const auto w = kind == MoeKind::kQwen3 ? torch::softmax(logits[t], -1).index_select(0, chosen)
                                             : torch::softmax(logits[t].index_select(0, chosen), -1);
      auto expected = torch::zeros({c.hiddenSize});
      for (std::int64_t j = 0; j < 2; ++j) {
        expected += w[j] / w.sum() * naiveExpert(moe, c.moe, chosen[j].item<std::int64_t>(), flat[t]);
      }
      EXPECT_TRUE(torch::allclose(replayed[t], expected, 1e-5, 1e-6)) << "token " << t;
    }
    EXPECT_FALSE(torch::allclose(replayed, out.reshape({10, -1}))) << "the other choice changed nothing";
  }
}

TEST(Sampling, GreedyTopPAndTemperatureDrawAsSpecified) {
  const auto logits = torch::log(torch::tensor({0.05, 0.5, 0.15, 0.3}, torch::kDouble)).to(torch::kFloat);
  std::mt19937_64 rng(7);
  EXPECT_EQ(nextToken(logits, Sampling{}, rng), 1);
  auto frequencies = [&](const Sampling& s) {
    std::vector<double> f(4, 0.0);
    constexpr int kDraws = 40000;
    for (int k = 0; k < kDraws; ++k) f[static_cast<std::size_t>(nextToken(logits, s, rng))] += 1.0 / kDraws;
    return f;
  };
  auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    for (std::size_t k = 0; k < got.size(); ++k) {
      // 4 standard deviations of a frequency over 40,000 draws (at most 0.01).
      EXPECT_NEAR(got[k], want[k], 4 * std::sqrt(want[k] * (1 - want[k]) / 40000) + 1e-9) << "token " << k;
    }
  };
  near(frequencies({1.0, 0.7, 0}), {0, 0.5 / 0.8, 0, 0.3 / 0.8});
  near(frequencies({1.0, 0.5, 0}), {0, 1, 0, 0});
  near(frequencies({1.0, 1.0, 0}), {0.05, 0.5, 0.15, 0.3});
  // Temperature 2: softmax(log p / 2) = sqrt(p), normalised.
  const double z = std::sqrt(0.05) + std::sqrt(0.5) + std::sqrt(0.15) + std::sqrt(0.3);
  near(frequencies({2.0, 1.0, 0}), {std::sqrt(0.05) / z, std::sqrt(0.5) / z, std::sqrt(0.15) / z, std::sqrt(0.3) / z});
}

}  // namespace
}  // namespace rp::model
