// RoPE's config fields (model/config_fields.h): each rope type as transformers reads it; the frequencies
// themselves are computed in model/rotary.cpp.
#include <cmath>
#include <utility>
#include <vector>

#include "model/config_fields.h"

namespace rp::model::config_detail {
namespace {

// YaRN as transformers' _compute_yarn_parameters reads it.
void parseYarn(const Fields& p, RopeConfig& rope) {
  rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
  rope.originalMaxPositions = p.positiveInt("original_max_position_embeddings");
  rope.betaFast = p.positiveNumberOr("beta_fast", 32.0);
  rope.betaSlow = p.positiveNumberOr("beta_slow", 1.0);
  rope.truncate = p.boolOr("truncate", true);
  const double mscale = p.positiveNumberOr("mscale", 0.0), mscaleAllDim = p.positiveNumberOr("mscale_all_dim", 0.0);
  if (p.has("attention_factor")) {
    rope.attentionFactor = p.positiveNumberOr("attention_factor", 1.0);
  } else if (mscale > 0 && mscaleAllDim > 0) {
    rope.attentionFactor = yarnMscale(rope.factor, mscale) / yarnMscale(rope.factor, mscaleAllDim);
  } else {
    rope.attentionFactor = yarnMscale(rope.factor, 1.0);
  }
}

// A longrope factor list: numbers, one per rotary frequency.
std::vector<double> ropeFactors(const Fields& p, const char* key, std::int64_t count) {
  const json& v = p.required(key, "a list of numbers");
  if (!v.is_array() || static_cast<std::int64_t>(v.size()) != count) {
    RP_THROW(InputError, "{}: field '{}' is {}, expected a list of {} numbers (head_dim x partial_rotary_factor / 2)",
             p.source(), key, v.dump(), count);
  }
  std::vector<double> out;
  for (const auto& x : v) out.push_back(p.positiveNumber(x, key));
  return out;
}

// LongRoPE as transformers' _compute_longrope_parameters reads it for Phi-3 ("su" and "yarn" name it too there):
// the config's top-level original_max_position_embeddings (4096 unless given) over the dict's, the factor
// max_position_embeddings / that unless given, the attention factor sqrt(1 + ln(factor) / ln(original)).
void parseLongrope(const Fields& f, const Fields& p, const ModelConfig& c, RopeConfig& rope) {
  rope.type = "longrope";
  rope.originalMaxPositions = f.positiveIntOr("original_max_position_embeddings", 4096);
  const double original = static_cast<double>(rope.originalMaxPositions);
  rope.factor = p.positiveNumberOr("factor", static_cast<double>(c.maxPositions) / original);
  rope.attentionFactor = p.positiveNumberOr(
      "attention_factor", rope.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(rope.factor) / std::log(original)));
  rope.shortFactor = ropeFactors(p, "short_factor", c.rotaryDim() / 2);
  rope.longFactor = ropeFactors(p, "long_factor", c.rotaryDim() / 2);
}

// One rope_parameters (or rope_scaling) object, `paramsKey` naming it in errors, over `rope`.
RopeConfig ropeOf(const json& params, const char* paramsKey, const Fields& f, RopeConfig rope, const ModelConfig& c) {
  const bool phi3 = c.arch == Architecture::kPhi3;
  if (!params.is_object()) {
    RP_THROW(InputError, "{}: field '{}' is {}, expected an object", f.source(), paramsKey, params.dump());
  }
  const Fields p(params, f.source());
  rope.theta = p.positiveNumberOr("rope_theta", rope.theta);
  rope.type = p.stringOr("rope_type", p.stringOr("type", "default"));
  if (rope.type == "default") return rope;
  if (phi3) {
    if (rope.type != "longrope" && rope.type != "su" && rope.type != "yarn") {
      RP_THROW(InputError, "{}: {}.rope_type '{}' is not supported for phi3 (supported: default, longrope)", f.source(),
               paramsKey, rope.type);
    }
    parseLongrope(f, p, c, rope);
    return rope;
  }
  if (rope.type == "linear") {
    rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
    return rope;
  }
  if (rope.type == "llama3") {
    rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
    rope.lowFreqFactor = p.positiveNumber(p.required("low_freq_factor", "a positive number"), "low_freq_factor");
    rope.highFreqFactor = p.positiveNumber(p.required("high_freq_factor", "a positive number"), "high_freq_factor");
    rope.originalMaxPositions = p.positiveInt("original_max_position_embeddings");
    if (rope.highFreqFactor <= rope.lowFreqFactor) {
      RP_THROW(InputError, "{}: {}.high_freq_factor ({}) must exceed low_freq_factor ({})", f.source(), paramsKey,
               rope.highFreqFactor, rope.lowFreqFactor);
    }
    return rope;
  }
  if (rope.type == "yarn") {
    parseYarn(p, rope);
    return rope;
  }
  RP_THROW(InputError, "{}: {}.rope_type '{}' is not supported (supported: default, linear, llama3, yarn)", f.source(),
           paramsKey, rope.type);
}

}  // namespace

double yarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RopeConfig parseRope(const json& j, const Fields& f, RopeConfig rope, const ModelConfig& c) {
  const char* keys[] = {"rope_parameters", "rope_scaling"};
  if (c.arch == Architecture::kPhi3) std::swap(keys[0], keys[1]);
  rope.theta = f.positiveNumberOr("rope_theta", rope.theta);
  for (const char* key : keys) {
    if (f.has(key)) return ropeOf(j.at(key), key, f, rope, c);
  }
  return rope;
}

// Gemma 3's two RoPE contexts: the full layers' (rope_theta, 1e6 unless given, with rope_scaling) and the sliding
// layers' (rope_local_base_freq, 1e4 unless given, unscaled), or rope_parameters' "full_attention" and
// "sliding_attention" entries (the form transformers 5 writes).
void parseGemma3Rope(const json& j, const Fields& f, ModelConfig& c) {
  RopeConfig global, local;
  global.theta = 1e6;
  local.theta = f.positiveNumberOr("rope_local_base_freq", 1e4);
  const json* params = f.has("rope_parameters") ? &j.at("rope_parameters") : nullptr;
  if (params != nullptr && params->is_object() &&
      (params->contains("full_attention") || params->contains("sliding_attention"))) {
    global.theta = f.positiveNumberOr("rope_theta", global.theta);
    if (params->contains("full_attention")) {
      global = ropeOf(params->at("full_attention"), "rope_parameters.full_attention", f, global, c);
    }
    if (params->contains("sliding_attention")) {
      local = ropeOf(params->at("sliding_attention"), "rope_parameters.sliding_attention", f, local, c);
    }
  } else {
    global = parseRope(j, f, global, c);
  }
  c.rope = global;
  c.slidingRope = local;
}

}  // namespace rp::model::config_detail
