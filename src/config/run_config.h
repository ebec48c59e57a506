// The typed run configuration, built from Values (values.h) and validated: cross-field rules and
// allowed words give InputErrors naming the key. Options that select behaviour are parsed once, into enums.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/values.h"
#include "device/device.h"
#include "schedule/dispatch.h"
#include "schedule/plan_search.h"

namespace rp::config {

enum class Dtype { kFloat32, kBFloat16, kFloat16 };             // model.dtype
enum class PipelineSchedule { kRoundPipe, kGPipe, kOneFOneB };  // pipeline.schedule
enum class Recompute { kStage, kLayer };                        // pipeline.recompute
enum class TensorChannelKind { kHost, kDirect, kNccl };         // pipeline.tensor_channel
const char* dtypeName(Dtype dtype);                             // "float32", "bfloat16", "float16"
const char* scheduleName(PipelineSchedule schedule);            // "roundpipe", "gpipe", "1f1b"
// optim.staleness: each step of staleness keeps one more version of the trainable weights and gradient slots
// in the node store.
inline constexpr std::int64_t kMaxStaleness = 8;

struct RunConfig {
  struct Model {
    std::string path;
    std::string tokenizer;  // defaults to path
    Dtype dtype;
    bool randomInit = false;
  } model;
  struct Data {
    std::vector<std::string> paths;
    std::string format;        // text | jsonl | alpaca | sharegpt | tokenized
    std::string sampleBy;      // line | paragraph | document
    std::string chatTemplate;  // auto | chatml | llama3
    bool addBos = true;
    bool addEos = true;
    bool skipBadRecords = false;
    std::vector<std::string> evalPaths;  // evaluation files (read like paths)
    double evalFraction = 0.0;           // or this fraction of the documents held out
  } data;
  struct Eval {
    std::int64_t every = 0;  // 0 = at the end only
    std::int64_t maxRows = 64;
  } eval;
  struct Train {
    std::int64_t seqLen, globalBatch, microbatches, maxSteps, epochs, seed, lossChunkTokens, threads;
    std::int64_t maxConsecutiveSkips;  // 0 = never stop
    double gradClip;
  } train;
  struct Optim {
    double lr, beta1, beta2, eps, weightDecay, minLrRatio;
    std::vector<std::string> noDecay;  // patterns of the tensors without weight decay (optim/adamw.h)
    bool amsgrad;
    std::int64_t stateBits;  // 32 or 8 (optim/blockwise8.h)
    std::string schedule;
    std::int64_t warmupSteps;
    // 0 = sync; k >= 1 = async: iteration t computes on W_{max(0, t-k)} (docs/optimizer.md, "Modes").
    std::int64_t staleness;  // <= kMaxStaleness
    bool async() const { return staleness > 0; }
    std::int64_t threads;   // optimizer threads per rank (0: its share of the cores; common/parallel.h)
    bool shardAcrossNodes;  // several nodes: each holds 1/N of the moments (docs/optimizer.md, "Across nodes")
    bool splitMaster;       // bfloat16 sync: masters as weight + low word (optim/adamw.h, Note [Split master])
  } optim;
  struct Pipeline {
    PipelineSchedule schedule;
    Recompute recompute;
    std::int64_t recomputeAhead;  // backward microbatches recomputed before their gradient arrives
    std::int64_t replanEvery;
    double uploadChunkMb;
    std::string plan;                 // "auto" or counts (schedule::parsePlan)
    std::string profile;              // a profile.json for the first automatic plan; empty = the FLOP proxy
    bool profileModelled;             // take `profile` although an emulated device's run wrote it
    schedule::PlannerKind planner;    // for auto plans
    schedule::DispatchRule dispatch;  // which worker runs each job (roundpipe)
    double memoryLimitGb;
    double stallTimeoutSeconds;
    double stallWarnSeconds;  // warns first when below stallTimeoutSeconds
    device::BackendChoice backend;
    std::int64_t ranksPerGpu;
    double memoryReserveGb;  // cuda: device memory left to the compute when the budget comes from the device
    TensorChannelKind tensorChannel;
    std::string emulatedProfile;  // emulated: the hardware file's name or path
    bool emulatedHostTraffic;     // emulated: copies touch the host memory a DMA would
    std::string emulatedWaits;    // emulated: "block" (sleep) or "spin", the host's waits for the device
    bool emulatedPinned;          // emulated: pinHost registers (false: pageable copies, as a refused registration)
  } pipeline;
  struct Precision {
    double lossScale;
    std::int64_t growthInterval;
  } precision;
  struct Lora {
    std::int64_t rank;
    double alpha, dropout;
    std::vector<std::string> targets;
    bool nf4Base;      // lora.base_dtype = "nf4": the base's linear weights stored NF4 (model/nf4.h)
    bool doubleQuant;  // lora.double_quant
  } lora;
  struct Output {
    std::string dir;
    std::int64_t logEvery;
    std::string samplePrompt;
    std::int64_t sampleTokens;
    bool sampleChat;  // the prompt as a user turn, through data.template
    double sampleTemperature, sampleTopP;
    double peakTflops;  // the job's peak for MFU; 0 = the GPUs' table value
  } output;
  struct Metrics {
    bool tensorboard;  // event files in <output.dir>/tb (trace/tensorboard.h)
  } metrics;
  struct Checkpoint {
    std::string dir;  // defaults to <output.dir>/checkpoints
    std::int64_t every, keep;
    bool atEnd;        // at_end: save the last step when the run ends
    bool stopOnError;  // on_error = "stop" (else "continue")
    bool async;
    std::string resume;  // "" | "latest" | a checkpoint name or directory
  } checkpoint;

  Values values;  // as given; effective() is what the run settled on
  // The effective config (config.effective.toml, --print-config, a checkpoint's manifest): valid TOML that runs
  // again as this run, self-consistent (optim.mode and optim.staleness as resolved, never two that disagree).
  std::vector<std::string> effective() const;
  // What the reporting rank logs once at start about the config itself (a --set that overrode the file's
  // value of the same setting).
  std::vector<std::string> notices;
};

RunConfig buildRunConfig(Values values);
// The rules a run with the pipeline runtime (more than one worker) adds, on `nodes` data-parallel nodes;
// InputErrors name the key and say what works.
void checkPipelineRun(const RunConfig& config, int nodes);
// Loads `tomlPath` with `overrides` against runSchema() and validates.
RunConfig loadRunConfig(const std::string& tomlPath, const std::vector<std::string>& overrides);

}  // namespace rp::config
