#include "config/run_config.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "config/schema.h"
#include "optim/adamw.h"

namespace rp::config {
namespace {

std::string oneOf(const Values& v, const std::string& key, std::initializer_list<const char*> allowed) {
  const std::string& value = v.getString(key);
  for (const char* a : allowed) {
    if (value == a) return value;
  }
  std::vector<std::string> quoted;
  for (const char* a : allowed) quoted.push_back(fmt::format("\"{}\"", a));
  RP_THROW(InputError, "{}: {} = \"{}\": expected one of {}", v.source({key.c_str()}), key, value,
           fmt::join(quoted, ", "));
}

std::int64_t atLeast(const Values& v, const std::string& key, std::int64_t minimum) {
  const auto value = v.getInt(key);
  if (value < minimum) RP_THROW(InputError, "{}: {} = {}: must be >= {}", v.source({key.c_str()}), key, value, minimum);
  return value;
}

double inRange(const Values& v, const std::string& key, double lo, double hi, bool hiOpen) {
  const double value = v.getFloat(key);
  if (value < lo || value > hi || (hiOpen && value == hi)) {
    RP_THROW(InputError, "{}: {} = {}: must be in [{}, {}{}", v.source({key.c_str()}), key, value, lo, hi,
             hiOpen ? ")" : "]");
  }
  return value;
}

template <typename Enum>
Enum parseEnum(const Values& v, const std::string& key, std::initializer_list<std::pair<const char*, Enum>> words) {
  std::vector<std::string> quoted;
  const std::string& value = v.getString(key);
  for (const auto& [word, e] : words) {
    if (value == word) return e;
    quoted.push_back(fmt::format("\"{}\"", word));
  }
  RP_THROW(InputError, "{}: {} = \"{}\": expected one of {}", v.source({key.c_str()}), key, value,
           fmt::join(quoted, ", "));
}

// optim.mode and optim.staleness: the mode alone gives 0 (sync) or 1 (async); the staleness alone decides
// the mode; both must agree, except that a --set of one overrides the file's value of the other (a notice
// says so). Two --sets, or the file itself, that disagree are an error.
std::int64_t staleness(const Values& v, std::vector<std::string>& notices) {
  const bool async = oneOf(v, "optim.mode", {"sync", "async"}) == "async";
  if (!v.isSet("optim.staleness")) return async ? 1 : 0;
  const std::int64_t k = v.getInt("optim.staleness");
  if (k < 0 || k > kMaxStaleness) {
    RP_THROW(InputError, "{}: optim.staleness = {}: must be in [0, {}] (0 = sync)", v.source({"optim.staleness"}), k,
             kMaxStaleness);
  }
  if (!v.isSet("optim.mode") || async == (k > 0)) return k;
  const Origin mode = v.origin("optim.mode"), stale = v.origin("optim.staleness");
  const char* modeWord = async ? "async" : "sync";
  if (stale == Origin::kOverride && mode == Origin::kFile) {
    notices.push_back(fmt::format("--set optim.staleness = {} overrides {}'s optim.mode = \"{}\": the mode is {}", k,
                                  v.source({"optim.mode"}), modeWord, k > 0 ? "async" : "sync"));
    return k;
  }
  if (mode == Origin::kOverride && stale == Origin::kFile) {
    const std::int64_t chosen = async ? 1 : 0;
    notices.push_back(fmt::format("--set optim.mode = \"{}\" overrides {}'s optim.staleness = {}: the staleness is {}",
                                  modeWord, v.source({"optim.staleness"}), k, chosen));
    return chosen;
  }
  RP_THROW(InputError, "{}: optim.mode = \"{}\" and optim.staleness = {} disagree: sync is staleness 0, async 1 to {}",
           v.source({"optim.mode", "optim.staleness"}), modeWord, k, kMaxStaleness);
}

// A directory the run creates or reuses: the nearest existing part of `path` must be a directory (a regular
// file there would end the run at its first write with a raw filesystem error).
void checkDirectoryPath(const Values& v, const char* key, const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (p.empty() || !std::filesystem::exists(p, ec) || std::filesystem::is_directory(p, ec)) return;
  RP_THROW(InputError, "{}: {} = \"{}\": \"{}\" is a file, not a directory", v.source({key}), key, path, p.string());
}

}  // namespace

const char* dtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kFloat16:
      return "float16";
  }
  return "?";
}

const char* scheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kRoundPipe:
      return "roundpipe";
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::kOneFOneB:
      return "1f1b";
  }
  return "?";
}

void checkPipelineRun(const RunConfig& c, int nodes) {
  const Values& v = c.values;
  if (c.train.globalBatch % (c.train.microbatches * nodes) != 0) {
    RP_THROW(InputError, "{}: train.global_batch = {} must be a multiple of train.microbatches ({}) x nodes ({})",
             v.source({"train.global_batch", "train.microbatches"}), c.train.globalBatch, c.train.microbatches, nodes);
  }
  if (c.pipeline.schedule != PipelineSchedule::kRoundPipe && c.pipeline.plan != "auto") {
    RP_THROW(InputError, "{}: pipeline.plan must be \"auto\" with pipeline.schedule = \"{}\" (one stage per worker)",
             v.source({"pipeline.plan", "pipeline.schedule"}), scheduleName(c.pipeline.schedule));
  }
  if (c.pipeline.schedule != PipelineSchedule::kRoundPipe &&
      c.pipeline.dispatch != schedule::DispatchRule::kRoundRobin) {
    RP_THROW(InputError,
             "{}: pipeline.dispatch = \"{}\" needs pipeline.schedule = \"roundpipe\" (\"{}\" binds each stage to "
             "one worker)",
             v.source({"pipeline.dispatch", "pipeline.schedule"}), schedule::dispatchRuleName(c.pipeline.dispatch),
             scheduleName(c.pipeline.schedule));
  }
  if (c.pipeline.backend == device::BackendChoice::kEmulated && c.pipeline.tensorChannel != TensorChannelKind::kHost) {
    RP_THROW(InputError,
             "{}: pipeline.backend = \"emulated\" hands stage outputs through the host: set pipeline.tensor_channel "
             "= \"host\"",
             v.source({"pipeline.backend", "pipeline.tensor_channel"}));
  }
  if (c.lora.rank > 0 && c.lora.dropout > 0) {
    RP_THROW(InputError,
             "{}: lora.dropout = {}: the pipeline runtime recomputes activations and does not yet replay "
             "dropout's random state; use lora.dropout = 0 with more than one worker or on a GPU",
             v.source({"lora.dropout"}), c.lora.dropout);
  }
}

RunConfig buildRunConfig(Values v) {
  RunConfig c;
  c.model.path = v.getString("model.path");
  c.model.tokenizer = v.getString("model.tokenizer").empty() ? c.model.path : v.getString("model.tokenizer");
  c.model.dtype = parseEnum<Dtype>(
      v, "model.dtype", {{"float32", Dtype::kFloat32}, {"bfloat16", Dtype::kBFloat16}, {"float16", Dtype::kFloat16}});
  c.model.randomInit = oneOf(v, "model.init", {"pretrained", "random"}) == "random";

  c.data.paths = v.getStringList("data.path");
  if (c.data.paths.empty())
    RP_THROW(InputError, "{}: data.path is empty (expected at least one file)", v.source({"data.path"}));
  c.data.format = oneOf(v, "data.format", {"text", "jsonl", "alpaca", "sharegpt", "tokenized"});
  c.data.sampleBy = oneOf(v, "data.sample_by", {"line", "paragraph", "document"});
  c.data.chatTemplate = oneOf(v, "data.template", {"auto", "model", "chatml", "llama3"});
  c.data.addBos = v.getBool("data.add_bos");
  c.data.addEos = v.getBool("data.add_eos");
  c.data.skipBadRecords = oneOf(v, "data.on_bad_record", {"error", "skip"}) == "skip";
  c.data.evalPaths = v.getStringList("data.eval_path");
  c.data.evalFraction = inRange(v, "data.eval_fraction", 0.0, 0.5, false);
  if (!c.data.evalPaths.empty() && c.data.evalFraction > 0) {
    RP_THROW(InputError,
             "{}: data.eval_path and data.eval_fraction = {} both set: evaluate on files or on held-out "
             "documents, not both",
             v.source({"data.eval_path", "data.eval_fraction"}), c.data.evalFraction);
  }
  c.eval.every = atLeast(v, "eval.every", 0);
  c.eval.maxRows = atLeast(v, "eval.max_rows", 1);

  c.train.seqLen = atLeast(v, "train.seq_len", 2);
  c.train.globalBatch = atLeast(v, "train.global_batch", 1);
  c.train.microbatches = atLeast(v, "train.microbatches", 1);
  if (c.train.globalBatch % c.train.microbatches != 0) {
    RP_THROW(InputError, "{}: train.global_batch = {} is not a multiple of train.microbatches = {}",
             v.source({"train.global_batch", "train.microbatches"}), c.train.globalBatch, c.train.microbatches);
  }
  c.train.maxSteps = atLeast(v, "train.max_steps", 1);
  c.train.epochs = atLeast(v, "train.epochs", 0);
  c.train.seed = v.getInt("train.seed");
  c.train.gradClip = inRange(v, "train.grad_clip", 0.0, 1e30, false);
  c.train.maxConsecutiveSkips = atLeast(v, "train.max_consecutive_skips", 0);
  c.train.lossChunkTokens = atLeast(v, "train.loss_chunk_tokens", 0);
  c.train.threads = atLeast(v, "train.threads", 0);

  c.optim.lr = inRange(v, "optim.lr", 0.0, 1e30, false);
  c.optim.beta1 = inRange(v, "optim.beta1", 0.0, 1.0, true);
  c.optim.beta2 = inRange(v, "optim.beta2", 0.0, 1.0, true);
  c.optim.eps = inRange(v, "optim.eps", 0.0, 1.0, false);
  c.optim.weightDecay = inRange(v, "optim.weight_decay", 0.0, 1e30, false);
  c.optim.noDecay = v.getStringList("optim.no_decay");
  for (const auto& pattern : c.optim.noDecay) {
    if (const auto problem = optim::patternError(pattern)) {
      RP_THROW(InputError, "{}: optim.no_decay contains \"{}\": not a regular expression ({})",
               v.source({"optim.no_decay"}), pattern, *problem);
    }
  }
  c.optim.amsgrad = v.getBool("optim.amsgrad");
  c.optim.stateBits = v.getInt("optim.state_bits");
  if (c.optim.stateBits != 32 && c.optim.stateBits != 8) {
    RP_THROW(InputError, "{}: optim.state_bits = {}: expected 32 or 8", v.source({"optim.state_bits"}),
             c.optim.stateBits);
  }
  if (c.optim.stateBits == 8 && c.optim.amsgrad) {
    RP_THROW(InputError, "{}: optim.amsgrad needs 32-bit states (optim.state_bits = 32): 8-bit AdamW has no AMSGrad",
             v.source({"optim.amsgrad", "optim.state_bits"}));
  }
  c.optim.schedule = oneOf(v, "optim.schedule", {"constant", "linear", "cosine"});
  c.optim.warmupSteps = atLeast(v, "optim.warmup_steps", 0);
  c.optim.minLrRatio = inRange(v, "optim.min_lr_ratio", 0.0, 1.0, false);
  c.optim.staleness = staleness(v, c.notices);
  c.optim.threads = atLeast(v, "optim.threads", 0);
  c.optim.shardAcrossNodes = v.getBool("optim.shard_across_nodes");
  c.optim.splitMaster = v.getBool("optim.split_master");

  c.pipeline.schedule = parseEnum<PipelineSchedule>(v, "pipeline.schedule",
                                                    {{"roundpipe", PipelineSchedule::kRoundPipe},
                                                     {"gpipe", PipelineSchedule::kGPipe},
                                                     {"1f1b", PipelineSchedule::kOneFOneB}});
  c.pipeline.recompute =
      parseEnum<Recompute>(v, "pipeline.recompute", {{"stage", Recompute::kStage}, {"layer", Recompute::kLayer}});
  c.pipeline.recomputeAhead = atLeast(v, "pipeline.recompute_ahead", 0);
  c.pipeline.replanEvery = atLeast(v, "pipeline.replan_every", 0);
  c.pipeline.uploadChunkMb = inRange(v, "pipeline.upload_chunk_mb", 1e-6, 1e9, false);
  c.pipeline.plan = v.getString("pipeline.plan");
  c.pipeline.profile = v.getString("pipeline.profile");
  c.pipeline.profileModelled = v.getBool("pipeline.profile_modelled");
  c.pipeline.planner = parseEnum<schedule::PlannerKind>(
      v, "pipeline.planner",
      {{"reference", schedule::PlannerKind::kReference}, {"search", schedule::PlannerKind::kSearch}});
  c.pipeline.dispatch =
      parseEnum<schedule::DispatchRule>(v, "pipeline.dispatch",
                                        {{"round_robin", schedule::DispatchRule::kRoundRobin},
                                         {"earliest_finish", schedule::DispatchRule::kEarliestFinish}});
  c.pipeline.memoryLimitGb = inRange(v, "pipeline.memory_limit_gb", 0.0, 1e9, false);
  c.pipeline.stallTimeoutSeconds = inRange(v, "pipeline.stall_timeout_s", 0.001, 1e9, false);
  c.pipeline.stallWarnSeconds = inRange(v, "pipeline.stall_warn_s", 0.001, 1e9, false);
  c.pipeline.backend = parseEnum<device::BackendChoice>(v, "pipeline.backend",
                                                        {{"auto", device::BackendChoice::kAuto},
                                                         {"cpu", device::BackendChoice::kCpu},
                                                         {"cuda", device::BackendChoice::kCuda},
                                                         {"emulated", device::BackendChoice::kEmulated}});
  c.pipeline.emulatedProfile = v.getString("pipeline.emulated_profile");
  c.pipeline.emulatedHostTraffic = v.getBool("pipeline.emulated_host_traffic");
  c.pipeline.emulatedWaits = v.getString("pipeline.emulated_waits");
  if (c.pipeline.emulatedWaits != "block" && c.pipeline.emulatedWaits != "spin") {
    RP_THROW(InputError, "{}: pipeline.emulated_waits = \"{}\": expected \"block\" or \"spin\"",
             v.source({"pipeline.emulated_waits"}), c.pipeline.emulatedWaits);
  }
  c.pipeline.emulatedPinned = v.getBool("pipeline.emulated_pinned");
  c.pipeline.ranksPerGpu = atLeast(v, "pipeline.ranks_per_gpu", 1);
  c.pipeline.memoryReserveGb = inRange(v, "pipeline.memory_reserve_gb", 0.0, 1e6, false);
  c.pipeline.tensorChannel = parseEnum<TensorChannelKind>(
      v, "pipeline.tensor_channel",
      {{"host", TensorChannelKind::kHost}, {"direct", TensorChannelKind::kDirect}, {"nccl", TensorChannelKind::kNccl}});
  if (c.pipeline.tensorChannel == TensorChannelKind::kNccl && c.pipeline.ranksPerGpu > 1) {
    RP_THROW(InputError,
             "{}: pipeline.tensor_channel = \"nccl\" needs one GPU per rank, and pipeline.ranks_per_gpu = {} (NCCL "
             "refuses two ranks on one device): use \"direct\" or \"host\"",
             v.source({"pipeline.tensor_channel", "pipeline.ranks_per_gpu"}), c.pipeline.ranksPerGpu);
  }
  c.precision.lossScale = inRange(v, "precision.loss_scale", 1.0, 1e30, false);
  c.precision.growthInterval = atLeast(v, "precision.growth_interval", 1);

  c.lora.rank = atLeast(v, "lora.rank", 0);
  c.lora.alpha = inRange(v, "lora.alpha", 0.0, 1e30, false);
  c.lora.dropout = inRange(v, "lora.dropout", 0.0, 1.0, true);
  c.lora.targets = v.getStringList("lora.targets");
  static const std::vector<std::string> kTargets{
      "q", "k", "v", "o", "gate", "up", "down", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  for (const auto& t : c.lora.targets) {
    if (std::find(kTargets.begin(), kTargets.end(), t) == kTargets.end()) {
      RP_THROW(InputError,
               "{}: lora.targets contains \"{}\": expected any of q, k, v, o, gate, up, down (and, on Qwen3.5's "
               "linear-attention layers, in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj)",
               v.source({"lora.targets"}), t);
    }
  }
  if (c.lora.rank > 0 && c.lora.targets.empty()) {
    RP_THROW(InputError, "{}: lora.rank = {} but lora.targets is empty", v.source({"lora.rank", "lora.targets"}),
             c.lora.rank);
  }
  c.lora.nf4Base = oneOf(v, "lora.base_dtype", {"model", "nf4"}) == "nf4";
  c.lora.doubleQuant = v.getBool("lora.double_quant");
  if (c.lora.nf4Base && c.lora.rank == 0) {
    RP_THROW(InputError,
             "{}: lora.base_dtype = \"nf4\" needs lora.rank > 0: a 4-bit base is frozen, only adapters train",
             v.source({"lora.base_dtype", "lora.rank"}));
  }

  c.output.dir = v.getString("output.dir");
  checkDirectoryPath(v, "output.dir", c.output.dir);
  c.output.logEvery = atLeast(v, "output.log_every", 1);
  c.output.peakTflops = inRange(v, "output.peak_tflops", 0.0, 1e9, false);
  c.output.samplePrompt = v.getString("output.sample_prompt");
  c.output.sampleTokens = atLeast(v, "output.sample_tokens", 1);
  c.output.sampleChat = v.getBool("output.sample_chat");
  c.output.sampleTemperature = inRange(v, "output.sample_temperature", 0.0, 1e6, false);
  c.output.sampleTopP = inRange(v, "output.sample_top_p", 1e-9, 1.0, false);
  c.metrics.tensorboard = v.getBool("metrics.tensorboard");
  c.checkpoint.dir = v.getString("checkpoint.dir");
  if (c.checkpoint.dir.empty()) {
    c.checkpoint.dir = (std::filesystem::path(c.output.dir) / "checkpoints").string();
  } else {
    checkDirectoryPath(v, "checkpoint.dir", c.checkpoint.dir);
  }
  c.checkpoint.every = atLeast(v, "checkpoint.every", 0);
  c.checkpoint.keep = atLeast(v, "checkpoint.keep", 0);
  c.checkpoint.atEnd = v.getBool("checkpoint.at_end");
  c.checkpoint.stopOnError = oneOf(v, "checkpoint.on_error", {"stop", "continue"}) == "stop";
  c.checkpoint.async = v.getBool("checkpoint.async");
  c.checkpoint.resume = v.getString("checkpoint.resume");
  c.values = std::move(v);
  return c;
}

std::vector<std::string> RunConfig::effective() const {
  // Paths as the run found them (from its working directory): the file runs from anywhere.
  namespace fs = std::filesystem;
  auto absolute = [](const std::string& path) {
    return path.empty() || fs::path(path).is_absolute() ? path : fs::absolute(path).lexically_normal().string();
  };
  std::map<std::string, Value> replaced;
  for (const char* key : {"model.path", "model.tokenizer", "pipeline.profile", "output.dir", "checkpoint.dir"}) {
    replaced[key] = absolute(values.getString(key));
  }
  for (const char* key : {"data.path", "data.eval_path"}) {
    std::vector<std::string> paths;
    for (const auto& path : values.getStringList(key)) paths.push_back(absolute(path));
    replaced[key] = paths;
  }
  for (const char* key : {"pipeline.emulated_profile", "checkpoint.resume"}) {  // a name, or a path
    const std::string& value = values.getString(key);
    if (value.find('/') != std::string::npos) replaced[key] = absolute(value);
  }
  return values.describe(replaced, {{"optim.mode", std::string(optim.staleness > 0 ? "async" : "sync")},
                                    {"optim.staleness", optim.staleness}});
}

RunConfig loadRunConfig(const std::string& tomlPath, const std::vector<std::string>& overrides) {
  return buildRunConfig(Values::load(runSchema(), tomlPath, overrides));
}

}  // namespace rp::config
