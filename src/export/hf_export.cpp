#include "export/hf_export.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"
#include "common/error.h"
#include "common/log.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/expert_layout.h"
#include "model/libtorch.h"
#include "model/lora.h"
#include "model/mxfp4.h"
#include "model/nf4.h"
#include "model/safetensors_writer.h"
#include "model/torch_bridge.h"

namespace rp::exporting {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

constexpr const char* kPeftPrefix = "base_model.model.";

struct Target {
  torch::ScalarType torch;
  safetensors::DType file;
  const char* name;
};

Target targetFor(const std::string& dtype, const std::string& where) {
  if (dtype == "float32") return {torch::kFloat, safetensors::DType::kF32, "float32"};
  if (dtype == "bfloat16") return {torch::kBFloat16, safetensors::DType::kBF16, "bfloat16"};
  if (dtype == "float16") return {torch::kHalf, safetensors::DType::kF16, "float16"};
  RP_THROW(InputError, "{} '{}': expected float32, bfloat16 or float16", where, dtype);
}

// Every tensor's masters from the checkpoint, whole, in fp32.
std::map<std::string, torch::Tensor> readMasters(const fs::path& dir, const checkpoint::Manifest& m) {
  std::map<std::string, torch::Tensor> out;
  std::vector<checkpoint::Slice> wanted;
  for (const auto& s : m.slices) {
    if (s.kind != checkpoint::Kind::kMaster || out.count(s.tensor)) continue;
    torch::Tensor t = torch::empty(s.shape, torch::kFloat);
    wanted.push_back({checkpoint::Kind::kMaster, s.tensor, s.shape, 0, t.numel(), t.data_ptr<float>()});
    out.emplace(s.tensor, t);
  }
  checkpoint::readSlices(dir, m, wanted);
  return out;
}

void writeJson(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: write failed", path.string());
}

// Tensors in name order, in `target`'s dtype, split into files of at most `maxBytes` (HF's layout:
// model.safetensors alone, or model-0000i-of-0000n.safetensors with model.safetensors.index.json).
void writeSharded(const fs::path& out, const std::string& stem, const std::map<std::string, torch::Tensor>& tensors,
                  const Target& target, double maxBytes) {
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  double bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    torch::Tensor c = t.to(target.torch).contiguous();
    const double n = static_cast<double>(c.nbytes());
    if (!shards.back().empty() && bytes + n > maxBytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace_back(name, c);
    bytes += n;
    total += n;
  }
  json weightMap = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1
                                 ? stem + ".safetensors"
                                 : fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, shards.size());
    std::vector<safetensors::OutTensor> list;
    for (const auto& [name, c] : shards[i]) {
      list.push_back({name, target.file, c.sizes().vec(), c.data_ptr()});
      weightMap[name] = file;
    }
    safetensors::writeFile((out / file).string(), list);
  }
  if (shards.size() > 1) {
    writeJson(out / (stem + ".safetensors.index.json"),
              {{"metadata", {{"total_size", static_cast<std::int64_t>(total)}}}, {"weight_map", weightMap}});
  }
}

void copyIfPresent(const fs::path& from, const fs::path& to) {
  if (!fs::exists(from)) return;
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) RP_THROW(SystemError, "cannot copy {} to {}: {}", from.string(), to.string(), ec.message());
}

bool expertAdapter(const std::string& path) {
  return path.find(".mlp.experts") != std::string::npos;
}

// PEFT's target_modules and target_parameters, from the tensors themselves (a MoE run adapts attention as
// modules and experts as parameters; model/lora.h): "...self_attn.q_proj.lora_A.weight" -> module q_proj,
// "...mlp.experts.base_layer.lora_A.weight" -> parameter mlp.experts.gate_up_proj.
struct Adapted {
  std::vector<std::string> modules, parameters;
};
Adapted adaptedTargets(const std::map<std::string, torch::Tensor>& masters, const model::ExpertTargets& experts) {
  std::set<std::string> modules, parameters;
  for (const auto& [name, t] : masters) {
    const auto a = name.find(".lora_A.weight");
    if (a == std::string::npos) continue;
    const std::string path = name.substr(0, a);
    if (expertAdapter(path)) {
      const std::string parameter = model::expertParameterOf(path, experts);
      parameters.insert(parameter.substr(parameter.rfind(".mlp.experts") + 1));
    } else {
      modules.insert(path.substr(path.rfind('.') + 1));
    }
  }
  return {{modules.begin(), modules.end()}, {parameters.begin(), parameters.end()}};
}

// A Gemma 3 multimodal base (model/config.h): PEFT names the text model's modules as
// Gemma3ForConditionalGeneration holds them, under model.language_model.
std::map<std::string, torch::Tensor> underLanguageModel(const std::map<std::string, torch::Tensor>& masters) {
  const std::string text = std::string(kPeftPrefix) + "model.";
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : masters) {
    out[name.rfind(text, 0) == 0 ? text + "language_model." + name.substr(text.size()) : name] = t;
  }
  return out;
}

// target_modules as one pattern PEFT matches whole against module names: the adapted modules of the language
// model alone (a list would adapt the vision tower's projections of the same names too, with no weights saved).
std::string languageModelPattern(const std::vector<std::string>& modules) {
  return fmt::format(R"(model\.language_model\..*\.({}))", fmt::join(modules, "|"));
}

// Adds an expert adapter's stacked delta to the parameter `name`, or, where the base stores its experts one
// tensor each (published Qwen3-MoE; model/expert_layout.h), to each expert's tensors.
void mergeExperts(std::map<std::string, torch::Tensor>& weights, const std::string& name, const torch::Tensor& delta,
                  const std::string& where) {
  if (auto w = weights.find(name); w != weights.end()) {
    w->second = w->second + delta;
    return;
  }
  for (const auto& [part, view] : model::perExpertViews(name, delta)) {
    const auto w = weights.find(part);
    if (w == weights.end())
      RP_THROW(InputError, "{}: LoRA adapts {}, which the base has neither whole nor as {}", where, name, part);
    w->second = w->second + view;
  }
}

// A GPT-OSS base's MXFP4 experts (model/mxfp4.h): `name` "X_blocks" becomes the dequantized "X" (float32);
// "X_scales" is consumed with it. A bitsandbytes 4-bit base's NF4 tensors (model/nf4.h): "X" becomes the
// dequantized "X", its quant state entries are consumed. False for every other tensor.
bool dequantizedInto(std::map<std::string, torch::Tensor>& weights, const safetensors::CheckpointReader& reader,
                     const std::string& name) {
  if (model::storedQuantized(reader, name)) {
    std::vector<std::string> parts;
    weights[name] = model::dequantizeNf4(model::readBnb4bit(reader, name, parts));
    return true;
  }
  for (const char* part :
       {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".quant_state.bitsandbytes__nf4"}) {
    if (name.ends_with(part) && model::storedQuantized(reader, name.substr(0, name.size() - std::strlen(part)))) {
      return true;
    }
  }
  auto stem = [&](const std::string& suffix) { return name.substr(0, name.size() - suffix.size()); };
  if (name.ends_with("_scales")) return reader.find(stem("_scales") + "_blocks") != nullptr;
  if (!name.ends_with("_blocks")) return false;
  const std::string tensor = stem("_blocks");
  const safetensors::TensorView* scales = reader.find(tensor + "_scales");
  if (scales == nullptr) return false;
  const safetensors::TensorView& blocks = reader.get(name);
  if (blocks.shape.size() != 4) {
    RP_THROW(InputError, "{}: MXFP4 tensor '{}' has {} dimensions, expected 4", *blocks.file, name,
             blocks.shape.size());
  }
  auto dense = torch::empty({blocks.shape[0], blocks.shape[2] * 32, blocks.shape[1]}, torch::kFloat);
  model::dequantizeMxfp4(blocks, *scales, dense);
  weights[tensor] = dense;
  return true;
}

// The output directory may not be the model the run started from (exporting there would replace the base
// model's config.json and weights), and may hold nothing unless `overwrite`: then the weight files and
// their index are removed first, since a stale shard beside the new files would be loaded with them.
void refuseOutput(const fs::path& out, const std::vector<fs::path>& runInputs, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) RP_THROW(InputError, "--output {}: is a file, not a directory", out.string());
  for (const auto& input : runInputs) {
    if (!input.empty() && fs::exists(input, ec) && fs::equivalent(out, input, ec)) {
      RP_THROW(InputError,
               "--output {}: is the directory the checkpoint's run read its model from ({}): exporting there would "
               "replace the base model; choose another directory (--overwrite does not apply here)",
               out.string(), input.string());
    }
  }
  std::vector<std::string> present;
  for (const auto& entry : fs::directory_iterator(out)) present.push_back(entry.path().filename().string());
  if (present.empty()) return;
  std::sort(present.begin(), present.end());
  if (!overwrite) {
    const std::size_t shown = std::min<std::size_t>(present.size(), 4);
    RP_THROW(InputError,
             "--output {}: is not empty ({}{}): pass --overwrite to replace its files, or choose an empty "
             "or new directory",
             out.string(), fmt::join(present.begin(), present.begin() + static_cast<long>(shown), ", "),
             present.size() > shown ? fmt::format(" and {} more", present.size() - shown) : std::string());
  }
  for (const auto& name : present) {
    if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) fs::remove(out / name);
  }
}

}  // namespace

void exportCheckpoint(const fs::path& dir, const fs::path& out, const ExportOptions& options) {
  const checkpoint::Manifest m = checkpoint::readManifest(dir);
  const std::string where = (dir / "manifest.json").string();
  const std::string device = m.training.value("device", "");
  if (device.rfind("emulated:", 0) == 0) {  // Note [Emulated checkpoints] (run/checkpointing.cpp)
    RP_THROW(InputError,
             "{}: the checkpoint is a run on the emulated device ({}), which models time and computes nothing: its "
             "weights were never trained, so there is no model to export",
             where, device);
  }
  const Target target = options.dtype.empty() ? targetFor(m.model.value("dtype", "float32"), where + ": model.dtype")
                                              : targetFor(options.dtype, "--dtype");
  const fs::path base = m.model.value("path", "");
  // model.tokenizer names tokenizer.json or its directory; the tokenizer files are copied from the directory.
  fs::path tokenizer = m.model.value("tokenizer", "");
  if (tokenizer.empty()) tokenizer = base;
  if (fs::is_regular_file(tokenizer)) tokenizer = tokenizer.parent_path();
  refuseOutput(out, {base, tokenizer}, options.overwrite);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) RP_THROW(SystemError, "cannot create {}: {}", out.string(), ec.message());
  std::map<std::string, torch::Tensor> masters = readMasters(dir, m);
  const bool expertAdapters = std::any_of(masters.begin(), masters.end(), [](const auto& t) {
    return t.first.rfind(kPeftPrefix, 0) == 0 && expertAdapter(t.first);
  });
  const model::ExpertTargets experts = expertAdapters
                                           ? model::expertTargets(m.lora.at("targets").get<std::vector<std::string>>())
                                           : model::ExpertTargets{};

  if (options.adapter) {
    if (m.lora.is_null())
      RP_THROW(InputError, "{}: --adapter needs a LoRA run; this checkpoint is a full fine-tune", where);
    const Adapted adapted = adaptedTargets(masters, experts);
    // transformers' AutoModelForCausalLM builds a gemma3 base as Gemma3ForConditionalGeneration (and a qwen3_5 one
    // as Qwen3_5ForCausalLM, whose modules are the text model's own names).
    const bool multimodal = m.model.at("config").value("model_type", "") == "gemma3";
    if (multimodal) masters = underLanguageModel(masters);
    json config = {{"peft_type", "LORA"},
                   {"task_type", "CAUSAL_LM"},
                   {"base_model_name_or_path", base.string()},
                   {"r", m.lora.at("rank")},
                   {"lora_alpha", m.lora.at("alpha")},
                   {"lora_dropout", m.lora.at("dropout")},
                   {"target_modules", multimodal ? json(languageModelPattern(adapted.modules)) : json(adapted.modules)},
                   {"bias", "none"},
                   {"fan_in_fan_out", false},
                   {"inference_mode", true},
                   {"init_lora_weights", true},
                   {"use_rslora", false},
                   {"use_dora", false},
                   {"modules_to_save", nullptr}};
    if (!adapted.parameters.empty()) config["target_parameters"] = adapted.parameters;
    writeJson(out / "adapter_config.json", config);
    writeSharded(out, "adapter_model", masters, target, 1e30);
    RP_LOG_INFO("exported the LoRA adapter of {} (step {}) to {}", dir.string(), m.step, out.string());
    return;
  }

  // The model: the base's tensors (pretrained runs), the trained masters over them, LoRA merged in.
  std::map<std::string, torch::Tensor> weights;
  std::unique_ptr<safetensors::CheckpointReader> reader;
  if (m.model.value("init", "pretrained") == "pretrained") {
    reader = std::make_unique<safetensors::CheckpointReader>(base.string());
    for (const auto& name : reader->names()) {
      if (!dequantizedInto(weights, *reader, name)) weights[name] = model::toTorch(reader->get(name)).to(torch::kFloat);
    }
  }
  // The text model's tensors under the base's own names (a multimodal base's language-model prefix).
  auto stored = [&](const std::string& name) { return reader ? model::storedName(*reader, name) : name; };
  // A QLoRA run's base (lora.base_dtype = "nf4"): the NF4 round trip the run computed with, as PEFT's
  // merge_and_unload on the dequantized bitsandbytes base would merge into.
  if (!m.lora.is_null() && m.lora.value("base_dtype", "model") == "nf4") {
    const bool doubleQuant = m.lora.value("double_quant", false);
    for (auto& [name, t] : weights) {
      if (model::nf4Linear(name)) t = model::dequantizeNf4(model::quantizeNf4(t, doubleQuant));
    }
  }
  const double scale = m.lora.is_null() ? 0.0 : m.lora.at("alpha").get<double>() / m.lora.at("rank").get<double>();
  for (auto& [name, t] : masters) {
    if (name.rfind(kPeftPrefix, 0) != 0) {
      weights[stored(name)] = t;
      continue;
    }
    const auto a = name.find(".lora_A.weight");
    if (a == std::string::npos) continue;  // lora_B: merged with its A
    const std::string module = name.substr(std::strlen(kPeftPrefix), a - std::strlen(kPeftPrefix));
    const auto b = masters.find(name.substr(0, a) + ".lora_B.weight");
    if (b == masters.end()) RP_THROW(InputError, "{}: LoRA tensor {} has no lora_B", where, name);
    if (expertAdapter(module)) {
      const bool transposed = m.model.at("config").value("model_type", "") == "gpt_oss";  // [E, in, out]
      const auto rank = m.lora.at("rank").get<std::int64_t>();
      mergeExperts(weights, model::expertParameterOf(module, experts),
                   model::expertDeltaWeight(t, b->second, rank, scale, transposed), where);
      continue;
    }
    const auto w = weights.find(stored(module + ".weight"));
    if (w == weights.end()) {
      RP_THROW(InputError, "{}: LoRA tensor {} has no base weight {}.weight in {}", where, name, module, base.string());
    }
    w->second = w->second + scale * torch::matmul(b->second, t);  // W + (alpha / r) B A
  }
  json config = m.model.at("config");
  // Qwen3-MoE experts as published checkpoints store them, one tensor per expert projection (what transformers
  // 4.x and 5.x and vLLM load); over the base's copies of the same tensors. GPT-OSS keeps the stacked tensors.
  if (config.value("model_type", "") == "qwen3_moe") model::toPublishedLayout(weights);
  config.erase("quantization_config");  // MXFP4 experts are written dequantized
  // Tied embeddings are stored once, as the embedding (what save_pretrained writes); a base checkpoint that
  // stored them as lm_head.weight would otherwise shadow the trained embedding.
  if (model::parseModelConfig(config, where + ": model.config").tieWordEmbeddings &&
      weights.count(stored("model.embed_tokens.weight"))) {
    weights.erase(stored("lm_head.weight"));
  }
  // transformers 5.x reads "dtype" (and loads in it by default); 4.x reads "torch_dtype". The base's values
  // would otherwise load the exported weights upcast.
  config["dtype"] = target.name;
  config["torch_dtype"] = target.name;
  writeJson(out / "config.json", config);
  writeSharded(out, "model", weights, target, options.maxShardBytes);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    copyIfPresent(tokenizer / f, out / f);
  }
  copyIfPresent(base / "generation_config.json", out / "generation_config.json");
  RP_LOG_INFO("exported {} (step {}{}) to {} as {}", dir.string(), m.step, m.lora.is_null() ? "" : ", LoRA merged",
              out.string(), target.name);
}

}  // namespace rp::exporting
