// roundpipe_generate: load a Hugging Face model (or a roundpipe checkpoint, exported on the fly), print a continuation
// of a prompt (greedy, or sampled with a temperature and top-p; with --chat the model's reply to the prompt as a user
// turn) and the model's loss on a text (docs/generate.md).
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <stdlib.h>

#include "checkpoint/directory.h"
#include "cli/command_line.h"
#include "cli/run_main.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "device/device.h"
#include "export/hf_export.h"
#include "model/causal_lm.h"
#include "model/generate.h"
#include "model/libtorch.h"

namespace {

using rp::model::CausalLM;

torch::ScalarType parseDtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  RP_THROW(rp::InputError, "--dtype '{}': expected float32 or bfloat16", name);
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  if (!in) RP_THROW(rp::InputError, "--loss-text {}: cannot open", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace fs = std::filesystem;

// What --model points at when it is not a Hugging Face model directory: refused, saying what it is and what to give.
void requireModelDirectory(const fs::path& dir) {
  if (fs::exists(dir / "config.json")) return;
  if (fs::exists(dir / "manifest.json") || fs::exists(dir / "latest")) {
    RP_THROW(rp::InputError,
             "--model {}: a roundpipe checkpoint, not a Hugging Face model: give it as --checkpoint {} (exported to a "
             "temporary directory on the fly), or export it once (roundpipe_export --checkpoint {} --output <dir>) "
             "and give --model <dir>",
             dir.string(), dir.string(), dir.string());
  }
  if (fs::exists(dir / "adapter_config.json")) {
    RP_THROW(rp::InputError,
             "--model {}: a PEFT LoRA adapter (adapter_config.json), not a model: give the run's checkpoint as "
             "--checkpoint <checkpoint.dir> (the LoRA merged into its base), or roundpipe_export it without --adapter "
             "and give that directory as --model",
             dir.string());
  }
  RP_THROW(rp::InputError,
           "--model {}: no config.json: expected a Hugging Face model directory (config.json, *.safetensors, "
           "tokenizer.json), or give a roundpipe checkpoint as --checkpoint",
           dir.string());
}

// A roundpipe checkpoint exported (LoRA merged, float32) into a temporary directory, removed when this ends.
class ExportedCheckpoint {
 public:
  explicit ExportedCheckpoint(const std::string& checkpoint) {
    fs::path source(checkpoint);
    if (!fs::exists(source / "manifest.json")) source = rp::checkpoint::CheckpointDir(source).resolve("latest");
    std::string pattern = (fs::temp_directory_path() / "roundpipe-generate-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      RP_THROW(rp::SystemError, "{}: cannot create a temporary directory to export {} into: {}", pattern,
               source.string(), std::strerror(errno));
    }
    dir_ = pattern;
    RP_LOG_INFO("exporting {} into {} to load it", source.string(), dir_.string());
    rp::exporting::ExportOptions options;
    options.dtype = "float32";
    try {
      rp::exporting::exportCheckpoint(source, dir_, options);
    } catch (...) {  // a failed export leaves nothing behind
      remove();
      throw;
    }
  }
  ~ExportedCheckpoint() { remove(); }
  ExportedCheckpoint(const ExportedCheckpoint&) = delete;
  ExportedCheckpoint& operator=(const ExportedCheckpoint&) = delete;
  const fs::path& dir() const { return dir_; }

 private:
  void remove() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path dir_;
};

// Mean next-token loss over `ids`, in windows of at most the model's context length.
double meanLoss(CausalLM& model, const std::vector<std::int32_t>& ids) {
  torch::NoGradGuard noGrad;
  const auto window = model.config().maxPositions;
  double sum = 0.0;
  std::int64_t tokens = 0;
  for (std::size_t start = 0; start + 1 < ids.size(); start += static_cast<std::size_t>(window - 1)) {
    const auto end = std::min(ids.size(), start + static_cast<std::size_t>(window));
    std::vector<std::int64_t> chunk(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                    ids.begin() + static_cast<std::ptrdiff_t>(end));
    const auto loss = model.loss(rp::model::causalBatch(torch::tensor(chunk).unsqueeze(0)));
    sum += loss.sum.item<double>();
    tokens += static_cast<std::int64_t>(chunk.size()) - 1;  // causalBatch: every token but the last has a target
  }
  return tokens > 0 ? sum / static_cast<double>(tokens) : 0.0;
}

int run(int argc, char** argv) {
  rp::cli::CommandLine line{
      "roundpipe_generate: a continuation (or chat reply) and the loss of a Hugging Face model (docs/model.md)"};
  std::string modelDir, checkpoint;
  std::string prompt = "Once upon a time";
  std::string lossText;
  std::string dtypeName = "float32";
  std::int64_t maxNew = 60;
  int threads = 0;
  bool chat = false;
  std::string templateName = "auto";
  rp::model::Sampling sampling;
  line.option("--model", modelDir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)");
  line.option("--checkpoint", checkpoint,
              "instead of --model: a roundpipe checkpoint, or a checkpoints directory (its newest), exported on the "
              "fly (LoRA merged)");
  line.option("--prompt", prompt, "prompt text");
  line.option("--max-new-tokens", maxNew, "tokens to generate").wholeAtLeast(1);
  line.option("--loss-text", lossText, "text file to report the model's mean next-token loss on");
  line.option("--dtype", dtypeName, "compute dtype: float32 | bfloat16");
  line.option("--threads", threads, "LibTorch intra-op threads (0 = RP_NUM_THREADS or LibTorch default)");
  line.flag("--chat", chat, "the prompt is a user turn: render it with the chat template, print the reply");
  line.option("--template", templateName, "with --chat: auto | model | chatml | llama3 (as data.template)");
  line.option("--temperature", sampling.temperature, "sampling temperature (0 = greedy)").range(0.0, 1e6);
  line.option("--top-p", sampling.topP, "nucleus sampling: the most likely tokens up to this mass").range(1e-9, 1.0);
  line.option("--seed", sampling.seed, "seed of the sampling");
  if (const auto code = line.parse(argc, argv)) return *code;
  if (modelDir.empty() == checkpoint.empty()) {
    RP_THROW(rp::InputError,
             "give one of --model (a Hugging Face model directory) and --checkpoint (a roundpipe "
             "checkpoint){}",
             modelDir.empty() ? "" : ", not both");
  }
  if (threads == 0) threads = static_cast<int>(rp::env::getInt(rp::env::kNumThreads));
  if (threads > 0) torch::set_num_threads(threads);
  const auto dtype = parseDtype(dtypeName);
  const auto devices = rp::device::probe();
  RP_LOG_INFO("backend {}: {}", rp::device::backendName(devices.backend), devices.reason);

  std::optional<ExportedCheckpoint> exported;
  if (!checkpoint.empty()) {
    exported.emplace(checkpoint);
    modelDir = exported->dir().string();
  } else {
    requireModelDirectory(modelDir);
  }
  auto model = rp::model::loadHfModel(modelDir, dtype);
  const auto& c = model->config();
  RP_LOG_INFO("{}: {} with {} layers, hidden {}, {}/{} heads, vocab {}", modelDir, rp::model::architectureName(c.arch),
              c.numLayers, c.hiddenSize, c.numHeads, c.numKvHeads, c.vocabSize);
  const auto tokenizer = rp::data::Tokenizer::fromFile(modelDir);

  std::optional<rp::data::ChatTemplate> chatTemplate;
  if (chat) {
    rp::data::OptionNames names;
    names.chatTemplate = "--template";
    chatTemplate = rp::data::resolveChatTemplate(templateName, tokenizer, names);
  }
  std::cout << (sampling.temperature > 0 ? "sampled: " : "greedy: ")
            << rp::model::sampleText(*model, tokenizer, prompt, maxNew, sampling,
                                     chatTemplate ? &*chatTemplate : nullptr)
            << '\n';

  if (!lossText.empty()) {
    const auto ids = tokenizer.encode(readText(lossText));
    const double loss = meanLoss(*model, ids);
    std::cout << fmt::format("loss on {} ({} tokens): {:.4f} (perplexity {:.2f})\n",
                             std::filesystem::path(lossText).filename().string(), ids.size(), loss, std::exp(loss));
  }
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  rp::cli::exitProcess(rp::cli::runMain([&] { return run(argc, argv); }));
}
