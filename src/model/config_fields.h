// Internal to the config parser (config.cpp, config_rope.cpp): a JSON object's fields read with errors naming the
// file and field, and the RoPE parsers. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/config.h"

namespace rp::model::config_detail {

using nlohmann::json;

class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

  std::int64_t positiveInt(const char* key) const {
    const json& v = required(key, "a positive integer");
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected a positive integer", source_, key, v.dump());
    }
    return v.get<std::int64_t>();
  }
  std::int64_t positiveIntOr(const char* key, std::int64_t fallback) const {
    return has(key) ? positiveInt(key) : fallback;
  }
  std::int64_t nonNegativeIntOr(const char* key, std::int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected an integer >= 0", source_, key, v.dump());
    }
    return v.get<std::int64_t>();
  }
  double positiveNumber(const json& v, const char* key) const {
    if (!v.is_number() || v.get<double>() <= 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected a positive number", source_, key, v.dump());
    }
    return v.get<double>();
  }
  double positiveNumberOr(const char* key, double fallback) const {
    return has(key) ? positiveNumber(j_.at(key), key) : fallback;
  }
  bool boolOr(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) RP_THROW(InputError, "{}: field '{}' is {}, expected true or false", source_, key, v.dump());
    return v.get<bool>();
  }
  std::string stringOr(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) RP_THROW(InputError, "{}: field '{}' is {}, expected a string", source_, key, v.dump());
    return v.get<std::string>();
  }
  // A token id, or the first of a list of ids (eos_token_id may be a list); -1 when absent or null.
  std::int64_t tokenIdOr(const char* key) const {
    if (!has(key)) return -1;
    const json& v = j_.at(key);
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<std::int64_t>();
    if (v.is_number_integer()) return v.get<std::int64_t>();
    RP_THROW(InputError, "{}: field '{}' is {}, expected a token id or a list of ids", source_, key, v.dump());
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& required(const char* key, const char* expected) const {
    if (!has(key)) RP_THROW(InputError, "{}: field '{}' is missing (expected {})", source_, key, expected);
    return j_.at(key);
  }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

// transformers' get_mscale: the YaRN attention factor for a context extended `scale` times.
double yarnMscale(double scale, double mscale);
// RoPE: the pre-v5 form (rope_theta + rope_scaling) and the v5 form (rope_parameters) are both accepted;
// `rope` holds the architecture's defaults. Phi-3 reads rope_scaling first, and longrope.
RopeConfig parseRope(const json& j, const Fields& f, RopeConfig rope, const ModelConfig& c);
// Gemma 3's two RoPE contexts: c.rope (the full layers') and c.slidingRope.
void parseGemma3Rope(const json& j, const Fields& f, ModelConfig& c);

}  // namespace rp::model::config_detail
