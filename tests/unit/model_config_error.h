// The message parseModelConfig throws for a config.json (named cfg.json), or "no error": the model-config tests'.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/config.h"

namespace rp::model {

inline std::string errorOf(const nlohmann::json& j) {
  try {
    parseModelConfig(j, "cfg.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace rp::model
