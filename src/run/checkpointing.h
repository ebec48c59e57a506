// What the single-process trainer and the pipeline runtime share around checkpoints (docs/checkpoint-format.md):
// the manifest's description of the run, the RNG state, the data cursor, and opening a checkpoint to resume
// from with the checks that it belongs to this run.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"
#include "config/run_config.h"
#include "data/corpus.h"
#include "data/packer.h"

namespace rp::run {

// What a resume is checked against (docs/checkpoint-format.md, "Resuming a changed run"): the dataset (its
// files, how they are read, the shuffle seed, the size and a fingerprint of the tokenized corpus) and the
// batch shape. Computed once per run: the fingerprint reads every token.
nlohmann::json runIdentity(const config::RunConfig& config, const data::TokenizedCorpus& corpus);

// The manifest's model, LoRA and run-config fields and training.run (= `identity`) for this run (step, the
// rest of training and slices left to fill).
checkpoint::Manifest describeRun(const config::RunConfig& config, const nlohmann::json& identity);

nlohmann::json optimizerJson(const config::RunConfig& config, std::int64_t stepCount);
nlohmann::json cursorJson(const data::DataCursor& cursor);
data::DataCursor cursorFromJson(const nlohmann::json& json, const std::string& where);

// torch's default CPU generator state, base64; and its restoration (errors name `where`).
std::string rngState();
void restoreRng(const std::string& base64, const std::string& where);

struct Resume {
  std::filesystem::path dir;
  checkpoint::Manifest manifest;
  std::string where() const { return (dir / "manifest.json").string(); }
};
// The checkpoint checkpoint.resume names, if any: resolved, its manifest read, and checked against this run:
// the same model config.json and LoRA settings, the same dataset and seed and optim.amsgrad (else an
// InputError naming the manifest and the key); a warning per setting that changes the trajectory (batch
// shape, learning rate and its schedule, the other AdamW settings, model.dtype).
// "auto" = the newest checkpoint if there is one, else none (for jobs that may be requeued).
std::optional<Resume> openResume(const config::RunConfig& config, const nlohmann::json& identity);

// A run that does not resume refuses a checkpoint.dir that already holds complete checkpoints (another run's:
// `--resume latest` would mix them up with this run's); the error says what to do. Nothing is deleted. Called
// first, before the model or the data load (the trainer's constructor, the pipeline runtime's on rank 0).
void refuseForeignCheckpoints(const config::RunConfig& config);

}  // namespace rp::run
