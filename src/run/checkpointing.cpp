#include "run/checkpointing.h"

#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "checkpoint/directory.h"
#include "common/error.h"
#include "common/log.h"

namespace rp::run {
namespace {

using nlohmann::json;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::uint8_t* data, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = (std::uint32_t{data[i]} << 16) | (i + 1 < n ? std::uint32_t{data[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{data[i + 2]} : 0);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < n ? kBase64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kBase64[v & 63] : '=';
  }
  return out;
}

std::vector<std::uint8_t> unbase64(const std::string& text, const std::string& where) {
  std::vector<std::uint8_t> out;
  std::uint32_t v = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* at = std::strchr(kBase64, c);
    if (at == nullptr || c == '\0') RP_THROW(InputError, "{}: the RNG state is not base64", where);
    v = (v << 6) | static_cast<std::uint32_t>(at - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((v >> bits) & 0xff));
    }
  }
  return out;
}

json readJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) RP_THROW(InputError, "{}: cannot open", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: not valid JSON: {}", path.string(), e.what());
  }
}

json loraJson(const config::RunConfig& c) {
  if (c.lora.rank <= 0) return nullptr;
  return {{"rank", c.lora.rank}, {"alpha", c.lora.alpha}, {"dropout", c.lora.dropout}, {"targets", c.lora.targets}};
}

}  // namespace

checkpoint::Manifest describeRun(const config::RunConfig& c) {
  checkpoint::Manifest m;
  const json modelConfig = readJsonFile(std::filesystem::path(c.model.path) / "config.json");
  m.model = {{"path", std::filesystem::absolute(c.model.path).string()},
             {"type", modelConfig.value("model_type", "")},
             {"dtype", config::dtypeName(c.model.dtype)},
             {"init", c.model.randomInit ? "random" : "pretrained"},
             {"tokenizer", std::filesystem::absolute(c.model.tokenizer).string()},
             {"config", modelConfig}};
  m.lora = loraJson(c);
  std::ostringstream toml;
  for (const auto& line : c.values.describe()) toml << line << '\n';
  m.runConfig = toml.str();
  return m;
}

json optimizerJson(const config::RunConfig& c, std::int64_t stepCount) {
  return {{"lr", c.optim.lr},
          {"beta1", c.optim.beta1},
          {"beta2", c.optim.beta2},
          {"eps", c.optim.eps},
          {"weight_decay", c.optim.weightDecay},
          {"amsgrad", c.optim.amsgrad},
          {"schedule", c.optim.schedule},
          {"warmup_steps", c.optim.warmupSteps},
          {"step_count", stepCount}};
}

json cursorJson(const data::DataCursor& cursor) {
  return {{"epoch", cursor.epoch},
          {"doc_in_order", cursor.docInOrder},
          {"token_offset", cursor.tokenOffset},
          {"rows_emitted", cursor.rowsEmitted}};
}

data::DataCursor cursorFromJson(const json& j, const std::string& where) {
  try {
    return {j.at("epoch").get<std::int64_t>(), j.at("doc_in_order").get<std::int64_t>(),
            j.at("token_offset").get<std::int64_t>(), j.at("rows_emitted").get<std::int64_t>()};
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: training.data_cursor is incomplete: {}", where, e.what());
  }
}

std::string rngState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const torch::Tensor state = generator.get_state();
  return base64(state.data_ptr<std::uint8_t>(), static_cast<std::size_t>(state.numel()));
}

void restoreRng(const std::string& text, const std::string& where) {
  auto bytes = unbase64(text, where);
  torch::Tensor state = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state);
  } catch (const c10::Error& e) {
    RP_THROW(InputError, "{}: the RNG state does not fit this LibTorch ({})", where, e.what_without_backtrace());
  }
}

void refuseForeignCheckpoints(const config::RunConfig& c) {
  if (!c.checkpoint.resume.empty()) return;
  const auto newest = checkpoint::CheckpointDir(c.checkpoint.dir).newest();
  if (!newest) return;
  RP_THROW(InputError,
           "checkpoint.dir {} already holds checkpoints of an earlier run (newest: {}): continue it with --resume "
           "latest, or start a new run in another output.dir or checkpoint.dir (nothing was deleted)",
           c.checkpoint.dir, newest->filename().string());
}

std::optional<Resume> openResume(const config::RunConfig& c) {
  if (c.checkpoint.resume.empty()) return std::nullopt;
  const checkpoint::CheckpointDir checkpoints(c.checkpoint.dir);
  Resume r;
  if (c.checkpoint.resume == "auto") {  // a requeued job: continue if this run has saved, else start
    const auto newest = checkpoints.newest();
    if (!newest) {
      RP_LOG_INFO("--resume auto: no checkpoint in {} yet, starting from step 0", c.checkpoint.dir);
      return std::nullopt;
    }
    r.dir = *newest;
  } else {
    r.dir = checkpoints.resolve(c.checkpoint.resume);
  }
  r.manifest = checkpoint::readManifest(r.dir);
  const checkpoint::Manifest mine = describeRun(c);
  if (r.manifest.model.value("config", json()) != mine.model["config"]) {
    RP_THROW(InputError, "{}: the checkpoint was trained from a model whose config.json differs from {}'s", r.where(),
             c.model.path);
  }
  if (r.manifest.lora != mine.lora) {
    RP_THROW(InputError, "{}: the checkpoint's LoRA settings {} differ from this run's {} (lora.*)", r.where(),
             r.manifest.lora.dump(), mine.lora.dump());
  }
  if (r.manifest.model.value("dtype", "") != config::dtypeName(c.model.dtype)) {
    RP_LOG_WARN("{}: saved with model.dtype = {}, resuming with {}", r.where(), r.manifest.model.value("dtype", ""),
                config::dtypeName(c.model.dtype));
  }
  RP_LOG_INFO("resuming from {} (step {})", r.dir.string(), r.manifest.step);
  return r;
}

}  // namespace rp::run
