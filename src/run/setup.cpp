#include "run/setup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/error.h"
#include "common/log.h"
#include "common/resident_memory.h"
#include "data/dataset.h"
#include "model/nf4.h"

namespace rp::run {

torch::ScalarType torchDtype(config::Dtype dtype) {
  switch (dtype) {
    case config::Dtype::kBFloat16:
      return torch::kBFloat16;
    case config::Dtype::kFloat16:
      return torch::kHalf;
    case config::Dtype::kFloat32:
      break;
  }
  return torch::kFloat;
}

optim::ModelCopy modelCopyFor(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return optim::ModelCopy::kBFloat16;
  if (dtype == torch::kHalf) return optim::ModelCopy::kFloat16;
  RP_CHECK(dtype == torch::kFloat, "model dtype {} (expected float32, bfloat16 or float16)", c10::toString(dtype));
  return optim::ModelCopy::kNone;
}

optim::AdamWConfig adamwConfigFor(const config::RunConfig& c) {
  return {c.optim.lr,          c.optim.beta1,   c.optim.beta2,   c.optim.eps,
          c.optim.weightDecay, c.optim.amsgrad, c.optim.noDecay, static_cast<int>(c.optim.stateBits)};
}

optim::LossScalerConfig lossScalerFor(const config::RunConfig& c) {
  return {c.precision.lossScale, 2.0, 0.5, c.precision.growthInterval};
}

model::ParamOptions paramOptionsFor(const config::RunConfig& c, torch::ScalarType dtype, bool allocate) {
  return {dtype, allocate, c.lora.nf4Base, c.lora.doubleQuant};
}

std::shared_ptr<model::CausalLM> loadModelFor(const config::RunConfig& c, torch::ScalarType dtype) {
  auto model = std::make_shared<model::CausalLM>(loadModelConfigFor(c), paramOptionsFor(c, dtype, true));
  initModelFor(c, *model);
  return model;
}

std::string smallerModelHint(const config::RunConfig& c) {
  if (c.lora.rank == 0) {
    return c.optim.stateBits == 8 ? "train LoRA (lora.rank), "
                                  : "keep 8-bit AdamW moments (optim.state_bits = 8), train LoRA (lora.rank), ";
  }
  return c.lora.nf4Base ? "" : "store the frozen base in 4 bits (lora.base_dtype = \"nf4\"), ";
}

model::LoraConfig loraConfigFor(const config::RunConfig& c) {
  return {c.lora.rank, c.lora.alpha, c.lora.dropout, c.lora.targets};
}

void initModelFor(const config::RunConfig& c, model::CausalLM& model) {
  if (!c.model.randomInit) {
    model::loadHfWeights(model, c.model.path);
  } else {
    model::initRandom(model);
    RP_LOG_INFO("{}: model.init = random: training from scratch (initializer_range {})", c.model.path,
                model.config().initializerRange);
  }
  if (c.lora.nf4Base) {
    std::int64_t packed = 0, params = 0, bytes = 0;
    for (const auto& [name, p] : model.hfParameters()) {
      if (const model::Nf4Packing* packing = model.packing(name)) {
        ++packed;
        params += packing->numel();
        bytes += packing->bytes();
      }
    }
    RP_LOG_INFO(
        "lora.base_dtype = nf4: {} linear weights of the base stored NF4 (blocks of {}{}): {:.1f}M parameters "
        "in {:.1f} MB, {:.3f} bytes each",
        packed, model::kNf4BlockSize, c.lora.doubleQuant ? ", double-quantized scales" : "",
        static_cast<double>(params) / 1e6, static_cast<double>(bytes) / 1e6,
        params > 0 ? static_cast<double>(bytes) / static_cast<double>(params) : 0.0);
  }
}

// Note [Sizes before allocating]: one microbatch's activations are sized from the config before anything is
// allocated — its hidden states and their gradients, and the MLP's intermediate activations of one layer, at least,
// in the model dtype — in doubles, so that train.seq_len = 1e9 or 2^63 - 1 is refused at once naming the keys, not
// OOM-killed after the model loaded, or an overflow deep in the planner. A lower bound: a run it passes can still
// need more (the stage slots, the recompute, LibTorch), which the node store's own check (Note [Host memory]) and
// the device's budget count.
void checkActivationMemory(const config::RunConfig& c, const model::ModelConfig& model, std::int64_t nodes) {
  const double rows =
      static_cast<double>(c.train.globalBatch) / static_cast<double>(nodes) / static_cast<double>(c.train.microbatches);
  const double tokens = rows * static_cast<double>(c.train.seqLen);
  const double element = c.model.dtype == config::Dtype::kFloat32 ? 4.0 : 2.0;
  const double perToken =
      2.0 * static_cast<double>(model.hiddenSize) + 2.0 * static_cast<double>(model.intermediateSize);
  const double need = tokens * perToken * element;
  const HostMemory host = availableHostMemory();
  if (host.availableBytes == 0 || need <= static_cast<double>(host.availableBytes)) return;
  RP_THROW(InputError,
           "{}: train.seq_len = {}: a microbatch of {} row(s) of it needs at least {:.3g} GB of activations ({}-wide "
           "hidden states and gradients, a {}-wide MLP, {}), but {} leaves {:.2f} GB: lower train.seq_len or "
           "train.global_batch, or raise train.microbatches",
           c.values.source({"train.seq_len"}), c.train.seqLen, rows, need / 1e9, model.hiddenSize,
           model.intermediateSize, config::dtypeName(c.model.dtype), host.source,
           static_cast<double>(host.availableBytes) / 1e9);
}

model::ModelConfig loadModelConfigFor(const config::RunConfig& c, std::int64_t nodes) {
  namespace fs = std::filesystem;
  const fs::path dir(c.model.path);
  if (!fs::is_regular_file(fs::is_directory(dir) ? dir / "config.json" : dir)) {
    RP_THROW(InputError,
             "{}: model.path = \"{}\" ({}): no Hugging Face config.json there (model.path is the model's directory: "
             "config.json, *.safetensors, tokenizer.json; a relative path is read from the directory the run starts "
             "in)",
             c.values.source({"model.path"}), c.model.path, fs::absolute(dir).lexically_normal().string());
  }
  model::ModelConfig model = model::loadModelConfig(c.model.path);
  checkActivationMemory(c, model, nodes);
  return model;
}

std::unique_ptr<data::Tokenizer> loadTokenizerFor(const config::RunConfig& c, const model::ModelConfig& model) {
  auto tokenizer = std::make_unique<data::Tokenizer>(data::Tokenizer::fromFile(c.model.tokenizer));
  if (tokenizer->vocabSize() > model.vocabSize && !c.values.isSet("model.tokenizer")) {
    RP_THROW(InputError,
             "{}: the model's own tokenizer has {} token ids but its config.json has vocab_size = {}: ids from {} on "
             "have no embedding row (a checkpoint whose files do not belong together?). Set model.tokenizer to a "
             "tokenizer of at most {} ids",
             tokenizer->path(), tokenizer->vocabSize(), model.vocabSize, model.vocabSize, model.vocabSize);
  }
  if (tokenizer->vocabSize() > model.vocabSize) {
    RP_THROW(InputError,
             "{}: model.tokenizer = \"{}\" has {} token ids but the model ({}/config.json) has vocab_size = {}: ids "
             "from {} on have no embedding row. Use the model's own tokenizer (leave model.tokenizer unset) or one "
             "of the same vocabulary",
             c.values.source({"model.tokenizer"}), c.model.tokenizer, tokenizer->vocabSize(), c.model.path,
             model.vocabSize, model.vocabSize);
  }
  // Samples as a user turn need a chat template: refused now, before the output directory is written.
  if (c.output.sampleChat && !c.output.samplePrompt.empty()) {
    try {
      (void)data::resolveChatTemplate(c.data.chatTemplate, *tokenizer);
    } catch (const InputError& e) {
      RP_THROW(InputError, "{}: output.sample_chat = true renders output.sample_prompt as a user turn: {}",
               c.values.source({"output.sample_chat"}), e.what());
    }
  }
  return tokenizer;
}

namespace {

// A corpus whose loss mask leaves no token a target (every reply empty or masked) would train nothing at every
// step: refused, naming the data (docs/training.md, "Steps without targets").
void refuseWithoutTargets(const config::RunConfig& c, const data::TokenizedCorpus& corpus) {
  if (corpus.trainMask.empty()) return;
  for (std::size_t d = 0; d < corpus.documentCount(); ++d) {
    for (std::uint64_t i = corpus.docOffsets[d] + 1; i < corpus.docOffsets[d + 1]; ++i) {
      if (corpus.trainMask[i] != 0) return;  // a target of the token before it
    }
  }
  RP_THROW(InputError,
           "{}: data.path = {} (data.format = \"{}\"): none of its {} documents has a target token: every reply "
           "is empty or masked out, so every step would train nothing",
           c.values.source({"data.path"}), fmt::join(c.data.paths, ", "), c.data.format, corpus.documentCount());
}

}  // namespace

Corpora loadCorporaFor(const config::RunConfig& c, const model::ModelConfig& model, const data::Tokenizer& tokenizer) {
  data::DatasetOptions d;
  d.paths = c.data.paths;
  d.format = c.data.format;
  d.sampleBy = c.data.sampleBy;
  d.chatTemplate = c.data.chatTemplate;
  d.addBos = c.data.addBos;
  d.addEos = c.data.addEos;
  d.skipBadRecords = c.data.skipBadRecords;
  d.bosId = static_cast<std::int32_t>(model.bosTokenId);
  d.eosId = static_cast<std::int32_t>(model.eosTokenId);
  Corpora out;
  out.train = data::loadDataset(d, tokenizer);
  refuseWithoutTargets(c, out.train);
  if (c.data.evalFraction > 0) {
    std::tie(out.train, out.eval) =
        data::holdOut(out.train, c.data.evalFraction, static_cast<std::uint64_t>(c.train.seed));
    RP_LOG_INFO("evaluation: {} of {} documents held out (data.eval_fraction = {})", out.eval.documentCount(),
                out.eval.documentCount() + out.train.documentCount(), c.data.evalFraction);
  } else if (!c.data.evalPaths.empty()) {
    d.paths = c.data.evalPaths;
    d.names.path = "data.eval_path";
    out.eval = data::loadDataset(d, tokenizer);
  }
  return out;
}

std::vector<std::string> startWarnings(const config::RunConfig& c, const model::ModelConfig& model, bool computesOnCpu,
                                       const std::string& flags) {
  std::vector<std::string> out;
  if (c.train.seqLen > model.maxPositions) {
    const bool scaled = model.rope.type != "default";
    out.push_back(fmt::format(
        "train.seq_len = {} is beyond the model's max_position_embeddings = {} ({}/config.json): packed rows "
        "restart positions at every document, so only documents longer than {} tokens meet positions {}",
        c.train.seqLen, model.maxPositions, c.model.path, model.maxPositions,
        scaled ? fmt::format("past what its {} RoPE scaling was configured for", model.rope.type)
               : std::string("the checkpoint was never trained on (it has no RoPE scaling)")));
  }
  const auto has = [&](const char* flag) {
    const std::string word = std::string(" ") + flag + " ";
    return (" " + flags + " ").find(word) != std::string::npos;
  };
  if (computesOnCpu && c.model.dtype == config::Dtype::kBFloat16 && !has("avx512_bf16") && !has("amx_bf16")) {
    out.push_back(
        "model.dtype = bfloat16 on a CPU without AVX512-BF16 or AMX: LibTorch's bfloat16 matmuls (the backward "
        "above all) run far slower than float32 here (measured: 170x at the LM head's size), so a step may take "
        "minutes; use model.dtype = \"float32\" on this CPU (docs/training.md, \"Warnings at start\")");
  }
  if (computesOnCpu && c.model.dtype == config::Dtype::kFloat16 && !has("avx512_fp16") && !has("amx_fp16")) {
    out.push_back(
        "model.dtype = float16 on a CPU without AVX512-FP16 or AMX-FP16: LibTorch's float16 matmuls run far "
        "slower than float32 here; use model.dtype = \"float32\" on this CPU (docs/training.md, \"Warnings at "
        "start\")");
  }
  return out;
}

std::string cpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? std::string() : line.substr(colon + 1);
    }
  }
  return {};
}

void logStartWarnings(const config::RunConfig& c, const model::ModelConfig& model, bool computesOnCpu) {
  for (const auto& warning : startWarnings(c, model, computesOnCpu, computesOnCpu ? cpuFlags() : std::string())) {
    RP_LOG_WARN("{}", warning);
  }
}

std::optional<StartLine> eightBitLine(const config::RunConfig& c,
                                      const std::vector<std::pair<std::string, std::size_t>>& trainable) {
  if (c.optim.stateBits != 8) return std::nullopt;
  std::size_t parameters = 0, eightBit = 0, tensors = 0, largest = 0;
  for (const auto& [name, n] : trainable) {
    parameters += n;
    largest = std::max(largest, n);
    if (!optim::eightBitStates(name, n)) continue;
    eightBit += n;
    ++tensors;
  }
  if (tensors == 0) {
    return StartLine{true, fmt::format("{}: optim.state_bits = 8 changes nothing in this run: no trainable tensor "
                                       "takes 8-bit moments, which need {} elements or more and not an embedding "
                                       "or the LM head (bitsandbytes' rule), and the largest of these {} has {} "
                                       "(docs/optimizer.md, \"8-bit states\")",
                                       c.values.source({"optim.state_bits"}), optim::kMinEightBitElements,
                                       trainable.size(), largest)};
  }
  return StartLine{false, fmt::format("8-bit AdamW moments for {} of the {} trainable parameters ({} of {} tensors); "
                                      "the others keep 32 bits (under {} elements, embeddings, the LM head)",
                                      eightBit, parameters, tensors, trainable.size(), optim::kMinEightBitElements)};
}

void logEightBitLine(const config::RunConfig& c, const std::vector<std::pair<std::string, std::size_t>>& trainable) {
  const auto line = eightBitLine(c, trainable);
  if (!line) return;
  if (line->warning) {
    RP_LOG_WARN("{}", line->text);
  } else {
    RP_LOG_INFO("{}", line->text);
  }
}

void writeEffectiveConfig(const config::RunConfig& c) {
  std::error_code ec;
  std::filesystem::create_directories(c.output.dir, ec);
  if (ec) {
    RP_THROW(InputError, "{}: output.dir = \"{}\": cannot create the directory ({})", c.values.source({"output.dir"}),
             c.output.dir, ec.message());
  }
  const auto path = std::filesystem::path(c.output.dir) / "config.effective.toml";
  std::ofstream out(path);
  out << "# The effective config of this run: roundpipe_train --config <this file> runs it again.\n";
  for (const auto& line : c.effective()) out << line << '\n';
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: cannot write the effective config", path.string());
}

}  // namespace rp::run
