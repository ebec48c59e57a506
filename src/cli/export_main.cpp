// roundpipe_export: a checkpoint to files transformers, PEFT and vLLM load (docs/checkpoint-format.md, "Export").
//   roundpipe_export --checkpoint out/checkpoints/latest --output hf-model [--dtype bfloat16] [--adapter]
#include "checkpoint/directory.h"
#include "cli/command_line.h"
#include "cli/run_main.h"
#include "export/hf_export.h"

namespace {

int run(int argc, char** argv) {
  rp::cli::CommandLine line{
      "roundpipe_export: export a roundpipe checkpoint as a Hugging Face model or a PEFT adapter"};
  std::string checkpoint, output;
  double maxShardGb = 5.0;
  rp::exporting::ExportOptions options;
  line.option("--checkpoint", checkpoint,
              "a checkpoint directory, or a checkpoints directory (then its newest complete checkpoint)")
      .required();
  line.option("--output", output, "output directory").required();
  line.option("--dtype", options.dtype, "float32 | bfloat16 | float16 (default: the run's model.dtype)");
  line.option("--max-shard-gb", maxShardGb, "largest safetensors file (a tensor is never split)").positive();
  line.flag("--adapter", options.adapter, "LoRA runs: write a PEFT adapter instead of the merged model");
  line.flag("--overwrite", options.overwrite,
            "write into a non-empty --output (its safetensors files are replaced); never the run's model.path");
  if (const auto code = line.parse(argc, argv)) return *code;
  options.maxShardBytes = maxShardGb * 1e9;
  std::filesystem::path dir(checkpoint);
  if (!std::filesystem::exists(dir / "manifest.json")) dir = rp::checkpoint::CheckpointDir(dir).resolve("latest");
  rp::exporting::exportCheckpoint(dir, output, options);
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  rp::cli::exitProcess(rp::cli::runMain([&] { return run(argc, argv); }));
}
