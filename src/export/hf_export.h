// roundpipe_export's work (docs/checkpoint-format.md, "Export"): a checkpoint to files transformers, PEFT
// and vLLM load — a Hugging Face model directory (full fine-tunes; LoRA merged into the base) or a PEFT
// adapter (LoRA runs).
#pragma once

#include <filesystem>
#include <string>

namespace rp::exporting {

struct ExportOptions {
  bool adapter = false;        // a PEFT adapter instead of a full model
  std::string dtype;           // float32 | bfloat16 | float16; empty = the run's model.dtype
  double maxShardBytes = 5e9;  // safetensors shard size limit (a tensor is never split)
  bool overwrite = false;      // write into a non-empty output directory (never the run's model.path)
};

// Writes the export of the checkpoint in `checkpointDir` into `outDir` (created). Errors name the
// checkpoint's manifest, the base model directory or the output file. An `outDir` that holds anything is
// refused unless options.overwrite (then its safetensors files and their index go first, so no stale shard
// is left beside the new ones); the run's own model.path (or tokenizer directory) is always refused.
void exportCheckpoint(const std::filesystem::path& checkpointDir, const std::filesystem::path& outDir,
                      const ExportOptions& options);

}  // namespace rp::exporting
