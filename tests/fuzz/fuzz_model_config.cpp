// A model's config.json (model/config.h): architecture, sizes, rope scaling, tied embeddings.
#include "fuzz_target.h"
#include "model/config.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  (void)model::loadModelConfig(writeScratch("config.json", data));
}

void writeSeeds(const std::string& dir) {
  if (const auto fixtures = fixturesDir(); !fixtures.empty()) {
    writeSeed(dir, "tinystories.json", readFile(fixtures + "/models/tinystories-656k/config.json"));
  }
  writeSeed(dir, "qwen3.json", R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":64,
"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
"vocab_size":300,"rms_norm_eps":1e-6,"rope_theta":1000000,"max_position_embeddings":512,
"tie_word_embeddings":true,"torch_dtype":"bfloat16"})");
  writeSeed(dir, "llama3.json", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":300,
"rms_norm_eps":1e-5,"rope_theta":500000,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
"high_freq_factor":4.0,"original_max_position_embeddings":8192},"max_position_embeddings":131072})");
}

}  // namespace rp::fuzz
