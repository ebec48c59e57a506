// roundpipe_export: a checkpoint to files transformers, PEFT and vLLM load (docs/checkpoint-format.md, "Export").
//   roundpipe_export --checkpoint out/checkpoints/latest --output hf-model [--dtype bfloat16] [--adapter]
#include <CLI/CLI.hpp>

#include "checkpoint/directory.h"
#include "cli/run_main.h"
#include "export/hf_export.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"roundpipe_export: export a roundpipe checkpoint as a Hugging Face model or a PEFT adapter"};
  std::string checkpoint, output;
  double maxShardGb = 5.0;
  rp::exporting::ExportOptions options;
  app.add_option("--checkpoint", checkpoint,
                 "a checkpoint directory, or a checkpoints directory (then its newest complete checkpoint)")
      ->required();
  app.add_option("--output", output, "output directory")->required();
  app.add_option("--dtype", options.dtype, "float32 | bfloat16 | float16 (default: the run's model.dtype)");
  app.add_option("--max-shard-gb", maxShardGb, "largest safetensors file (a tensor is never split)")
      ->check(rp::cli::positiveNumber());
  app.add_flag("--adapter", options.adapter, "LoRA runs: write a PEFT adapter instead of the merged model");
  app.add_flag("--overwrite", options.overwrite,
               "write into a non-empty --output (its safetensors files are replaced); never the run's model.path");
  if (const auto code = rp::cli::parseCommandLine(app, argc, argv)) return *code;
  options.maxShardBytes = maxShardGb * 1e9;
  std::filesystem::path dir(checkpoint);
  if (!std::filesystem::exists(dir / "manifest.json")) dir = rp::checkpoint::CheckpointDir(dir).resolve("latest");
  rp::exporting::exportCheckpoint(dir, output, options);
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return rp::cli::runMain([&] { return run(argc, argv); });
}
