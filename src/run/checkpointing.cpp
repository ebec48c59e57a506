#include "run/checkpointing.h"

#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/directory.h"
#include "common/error.h"
#include "common/log.h"
#include "common/version.h"
#include "model/libtorch.h"

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
  json lora{{"rank", c.lora.rank}, {"alpha", c.lora.alpha}, {"dropout", c.lora.dropout}, {"targets", c.lora.targets}};
  if (c.lora.nf4Base) {  // only then: a manifest without it is a model-dtype base
    lora["base_dtype"] = "nf4";
    lora["double_quant"] = c.lora.doubleQuant;
  }
  return lora;
}

// 64-bit FNV-1a over words (one multiply per token keeps a billion-token corpus to about a second).
class Fingerprint {
 public:
  template <typename T>
  void add(const std::vector<T>& values) {
    for (const T v : values) hash_ = (hash_ ^ static_cast<std::uint64_t>(v)) * 1099511628211ull;
    hash_ = (hash_ ^ values.size()) * 1099511628211ull;
  }
  std::string hex() const { return fmt::format("{:016x}", hash_); }

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

std::string quoted(const json& value) {
  return value.is_string() ? fmt::format("\"{}\"", value.get<std::string>()) : value.dump();
}

constexpr const char* kNewData =
    "resume with the checkpoint's setting, or to train on other data start a new run from the exported "
    "checkpoint (roundpipe_export; model.path = the export)";

// Refuses what would move the data position to other documents (a different tokenized corpus, or another
// shuffle seed); names what changed. Moved files with the same contents are fine.
void checkData(const json& saved, const json& mine, const std::string& where) {
  if (saved.at("seed") != mine.at("seed")) {
    RP_THROW(InputError, "{}: train.seed was {}, now {}: the data order depends on it; {}", where,
             saved.at("seed").dump(), mine.at("seed").dump(), kNewData);
  }
  if (saved.at("fingerprint") == mine.at("fingerprint")) {
    if (saved.at("path") != mine.at("path")) {
      RP_LOG_INFO("{}: data.path is now {} (was {}); the tokenized data is the same", where, mine.at("path").dump(),
                  saved.at("path").dump());
    }
    return;
  }
  std::string changed;
  for (const char* field : {"path", "format", "sample_by", "template", "add_bos", "add_eos", "on_bad_record"}) {
    if (saved.value(field, json()) != mine.at(field)) {
      changed += fmt::format("{}data.{} {} -> {}", changed.empty() ? "" : ", ", field,
                             quoted(saved.value(field, json())), quoted(mine.at(field)));
    }
  }
  RP_THROW(InputError,
           "{}: the tokenized dataset is not the checkpoint's ({} documents, {} tokens then; {} and {} now; {}): "
           "its data position would point elsewhere; {}",
           where, saved.at("documents").dump(), saved.at("tokens").dump(), mine.at("documents").dump(),
           mine.at("tokens").dump(), changed.empty() ? "the files in data.path changed" : changed, kNewData);
}

// Warns once per setting that changes what the resumed run does from here on.
void warnChanged(const std::string& where, const std::string& key, const json& saved, const json& now,
                 const std::string& effect) {
  if (saved.is_null() || saved == now) return;
  RP_LOG_WARN("{}: {} was {} in the checkpoint's run, now {}: {}", where, key, quoted(saved), quoted(now), effect);
}

void checkRun(const checkpoint::Manifest& saved, const json& identity, const config::RunConfig& c,
              const std::string& where) {
  const json run = saved.training.value("run", json());
  if (run.is_null()) {
    RP_LOG_INFO("{}: saved before checkpoints recorded their dataset; the dataset is not checked", where);
  } else {
    checkData(run.at("data"), identity.at("data"), where);
    const json& was = run.at("batch");
    const json& now = identity.at("batch");
    for (const char* field : {"seq_len", "global_batch"}) {
      warnChanged(where, fmt::format("train.{}", field), was.value(field, json()), now.at(field),
                  "the run goes on with the new batch shape (tokens per step change)");
    }
    warnChanged(where, "train.epochs", was.value("epochs", json()), now.at("epochs"), "the run stops at the new limit");
    if (c.optim.schedule != "constant") {
      warnChanged(where, "train.max_steps", was.value("max_steps", json()), now.at("max_steps"),
                  fmt::format("the {} learning-rate schedule now ends at the new step", c.optim.schedule));
    }
  }
  const json optimizer = saved.training.value("optimizer", json());
  if (optimizer.is_null()) return;
  const json mine = optimizerJson(c, 0);
  if (optimizer.value("amsgrad", false) != c.optim.amsgrad) {
    RP_THROW(InputError,
             "{}: optim.amsgrad was {}, now {}: the optimizer state (the running maximum of the second moments) "
             "does not carry over; resume with optim.amsgrad = {}",
             where, optimizer.value("amsgrad", false), c.optim.amsgrad, optimizer.value("amsgrad", false));
  }
  warnChanged(where, "optim.state_bits", optimizer.value("state_bits", json(32)), mine.at("state_bits"),
              "the moments are converted as they load: quantized to 8-bit blocks, or 8-bit codes dequantized "
              "(docs/optimizer.md, \"8-bit states\")");
  for (const char* field : {"lr", "schedule", "warmup_steps", "min_lr_ratio"}) {
    warnChanged(where, fmt::format("optim.{}", field), optimizer.value(field, json()), mine.at(field),
                "the learning rate follows the new setting from the checkpoint's step on");
  }
  for (const char* field : {"beta1", "beta2", "eps", "weight_decay", "no_decay"}) {
    warnChanged(where, fmt::format("optim.{}", field), optimizer.value(field, json()), mine.at(field),
                "AdamW goes on from the saved moments with the new setting");
  }
  // Checkpoints from before optim.no_decay existed decayed every tensor.
  if (!optimizer.contains("no_decay") && !c.optim.noDecay.empty() && c.optim.weightDecay > 0) {
    RP_LOG_WARN(
        "{}: the checkpoint's run decayed every tensor (saved before optim.no_decay); this run exempts "
        "those optim.no_decay names (biases, normalisation weights by default): set optim.no_decay = [] to "
        "keep the old behaviour",
        where);
  }
}

}  // namespace

json runIdentity(const config::RunConfig& c, const data::TokenizedCorpus& corpus) {
  std::vector<std::string> paths;
  for (const auto& p : c.data.paths) paths.push_back(std::filesystem::absolute(p).lexically_normal().string());
  Fingerprint f;
  f.add(corpus.tokens);
  f.add(corpus.docOffsets);
  f.add(corpus.trainMask);
  return {{"data",
           {{"path", paths},
            {"format", c.data.format},
            {"sample_by", c.data.sampleBy},
            {"template", c.data.chatTemplate},
            {"add_bos", c.data.addBos},
            {"add_eos", c.data.addEos},
            {"on_bad_record", c.data.skipBadRecords ? "skip" : "error"},
            {"seed", c.train.seed},
            {"documents", corpus.documentCount()},
            {"tokens", corpus.tokens.size()},
            {"fingerprint", f.hex()}}},
          {"batch",
           {{"seq_len", c.train.seqLen},
            {"global_batch", c.train.globalBatch},
            {"max_steps", c.train.maxSteps},
            {"epochs", c.train.epochs}}}};
}

checkpoint::Manifest describeRun(const config::RunConfig& c, const json& identity) {
  checkpoint::Manifest m;
  m.writtenBy = versionLine();
  const json modelConfig = readJsonFile(std::filesystem::path(c.model.path) / "config.json");
  m.model = {{"path", std::filesystem::absolute(c.model.path).string()},
             {"type", modelConfig.value("model_type", "")},
             {"dtype", config::dtypeName(c.model.dtype)},
             {"init", c.model.randomInit ? "random" : "pretrained"},
             {"tokenizer", std::filesystem::absolute(c.model.tokenizer).string()},
             {"config", modelConfig}};
  m.lora = loraJson(c);
  m.training = {{"run", identity}};
  // Note [Emulated checkpoints]: an emulated device computes nothing (meta tensors), so its run's weights are
  // the initial ones moved by weight decay alone; the manifest says so, and export and a real run refuse it.
  if (c.pipeline.backend == device::BackendChoice::kEmulated) {
    m.training["device"] = "emulated:" + std::filesystem::path(c.pipeline.emulatedProfile).stem().string();
  }
  std::ostringstream toml;
  for (const auto& line : c.effective()) toml << line << '\n';
  m.runConfig = toml.str();
  return m;
}

json optimizerJson(const config::RunConfig& c, std::int64_t stepCount) {
  return {{"lr", c.optim.lr},
          {"beta1", c.optim.beta1},
          {"beta2", c.optim.beta2},
          {"eps", c.optim.eps},
          {"weight_decay", c.optim.weightDecay},
          {"no_decay", c.optim.noDecay},
          {"amsgrad", c.optim.amsgrad},
          {"state_bits", c.optim.stateBits},
          {"schedule", c.optim.schedule},
          {"warmup_steps", c.optim.warmupSteps},
          {"min_lr_ratio", c.optim.minLrRatio},
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

std::optional<Resume> openResume(const config::RunConfig& c, const json& identity) {
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
  const checkpoint::Manifest mine = describeRun(c, identity);
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
  checkRun(r.manifest, identity, c, r.where());
  const std::string device = r.manifest.training.value("device", "");
  if (device.rfind("emulated:", 0) == 0 && c.pipeline.backend != device::BackendChoice::kEmulated) {
    RP_THROW(InputError,
             "{}: the checkpoint is a run on the emulated device ({}), which models time and computes nothing: its "
             "weights were never trained; resume it with pipeline.backend = \"emulated\", or start from the model "
             "(Note [Emulated checkpoints], docs/emulated.md)",
             r.where(), device);
  }
  RP_LOG_INFO("resuming from {} (step {})", r.dir.string(), r.manifest.step);
  return r;
}

}  // namespace rp::run
