#include "config/values.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <toml++/toml.h>

#include "common/error.h"

namespace rp::config {
namespace {

// A TOML basic string: quotes, backslashes and control characters escaped (bytes >= 0x80 pass: UTF-8).
std::string tomlString(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

// A value as TOML reads it back to the same value (config.effective.toml runs again): strings quoted and
// escaped, lists as arrays of strings, floats with a fraction or an exponent (the shortest that round-trips).
std::string render(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          std::string text = fmt::format("{}", x);
          if (text.find_first_of(".e") == std::string::npos) text += ".0";
          return text;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return tomlString(x);
        } else {
          std::vector<std::string> items;
          for (const auto& item : x) items.push_back(tomlString(item));
          return fmt::format("[{}]", fmt::join(items, ", "));
        }
      },
      v);
}

// A TOML node as a value of `type`, or nullopt when it has another type.
std::optional<Value> fromToml(const toml::node& node, Type type) {
  switch (type) {
    case Type::kBool:
      if (auto v = node.value_exact<bool>()) return *v;
      break;
    case Type::kInt:
      if (auto v = node.value_exact<std::int64_t>()) return *v;
      break;
    case Type::kFloat:
      if (auto v = node.value_exact<double>()) return *v;
      if (auto v = node.value_exact<std::int64_t>()) return static_cast<double>(*v);
      break;
    case Type::kString:
      if (auto v = node.value_exact<std::string>()) return *v;
      break;
    case Type::kStringList:
      if (auto v = node.value_exact<std::string>()) return std::vector<std::string>{*v};
      if (const auto* array = node.as_array()) {
        std::vector<std::string> out;
        for (const auto& item : *array) {
          auto s = item.value_exact<std::string>();
          if (!s) return std::nullopt;
          out.push_back(*s);
        }
        return out;
      }
      break;
  }
  return std::nullopt;
}

// A --set value: parsed with TOML syntax first (so 1e-4, true, "x", ["a","b"] work); bare words are strings
// and comma-separated bare words are string lists.
std::optional<Value> fromText(const std::string& text, Type type) {
  try {
    const auto table = toml::parse("v = " + text);
    if (const auto* node = table.get("v")) {
      if (auto v = fromToml(*node, type)) return v;
    }
  } catch (const toml::parse_error&) {
    // not TOML syntax: fall through to bare words
  }
  if (type == Type::kString) return text;
  if (type == Type::kStringList) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= text.size()) {
      const auto comma = text.find(',', start);
      out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  return std::nullopt;
}

void flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (const auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      flatten(*sub, key, out);
    } else {
      out.emplace_back(key, &node);
    }
  }
}

const KeySpec* find(const std::vector<KeySpec>& schema, const std::string& key) {
  for (const auto& spec : schema) {
    if (key == spec.key) return &spec;
  }
  return nullptr;
}

// The closest known key by edit distance, for "did you mean" hints.
std::string closest(const std::vector<KeySpec>& schema, const std::string& key) {
  std::string best;
  std::size_t bestDistance = 4;  // only suggest near misses
  for (const auto& spec : schema) {
    const std::string candidate = spec.key;
    std::vector<std::size_t> row(candidate.size() + 1);
    for (std::size_t j = 0; j <= candidate.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= key.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= candidate.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (key[i - 1] == candidate[j - 1] ? 0u : 1u)});
        diagonal = up;
      }
    }
    if (row[candidate.size()] < bestDistance) {
      bestDistance = row[candidate.size()];
      best = candidate;
    }
  }
  return best;
}

[[noreturn]] void unknownKey(const std::vector<KeySpec>& schema, const std::string& where, const std::string& key) {
  const std::string hint = closest(schema, key);
  RP_THROW(InputError, "{}: unknown key '{}'{}", where, key,
           hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint));
}

// No key of the schema means anything by NaN or infinity (a NaN passes every range check after this one).
void checkFinite(const std::string& where, const std::string& key, const Value& value) {
  const double* number = std::get_if<double>(&value);
  if (number != nullptr && !std::isfinite(*number)) {
    RP_THROW(InputError, "{}: key '{}' = {}: must be a finite number", where, key, *number);
  }
}

}  // namespace

const char* typeName(Type type) {
  switch (type) {
    case Type::kBool:
      return "a boolean";
    case Type::kInt:
      return "an integer";
    case Type::kFloat:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kStringList:
      return "a string or a list of strings";
  }
  return "?";
}

Values Values::load(const std::vector<KeySpec>& schema, const std::string& tomlPath,
                    const std::vector<std::string>& overrides) {
  Values values;
  values.source_ = tomlPath.empty() ? "<defaults>" : tomlPath;
  for (const auto& spec : schema) values.entries_[spec.key] = Entry{spec.type, spec.fallback, Origin::kDefault};

  if (!tomlPath.empty()) {
    toml::table table;
    try {
      table = toml::parse_file(tomlPath);
    } catch (const toml::parse_error& e) {
      const auto& where = e.source().begin;
      RP_THROW(InputError, "{}:{}:{}: {}", tomlPath, where.line, where.column, e.description());
    }
    std::vector<std::pair<std::string, const toml::node*>> flat;
    flatten(table, "", flat);
    for (const auto& [key, node] : flat) {
      const KeySpec* spec = find(schema, key);
      if (spec == nullptr) {
        // `seq_len = {a = 1}` flattens to train.seq_len.a: the key is known, its value is a table.
        for (auto dot = key.rfind('.'); dot != std::string::npos && dot > 0; dot = key.rfind('.', dot - 1)) {
          if (const KeySpec* parent = find(schema, key.substr(0, dot))) {
            RP_THROW(InputError, "{}: key '{}' must be {}, not a table (line {})", tomlPath, parent->key,
                     typeName(parent->type), node->source().begin.line);
          }
        }
        unknownKey(schema, tomlPath, key);
      }
      auto value = fromToml(*node, spec->type);
      if (!value) {
        RP_THROW(InputError, "{}: key '{}' must be {} (line {})", tomlPath, key, typeName(spec->type),
                 node->source().begin.line);
      }
      checkFinite(tomlPath, key, *value);
      values.entries_[key] = Entry{spec->type, *value, Origin::kFile};
    }
  }

  for (const auto& assignment : overrides) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      RP_THROW(InputError, "--set '{}': expected key=value", assignment);
    }
    const std::string key = assignment.substr(0, eq);
    const KeySpec* spec = find(schema, key);
    if (spec == nullptr) unknownKey(schema, "--set", key);
    auto value = fromText(assignment.substr(eq + 1), spec->type);
    if (!value)
      RP_THROW(InputError, "--set {}: value '{}' is not {}", key, assignment.substr(eq + 1), typeName(spec->type));
    checkFinite("--set", key, *value);
    values.entries_[key] = Entry{spec->type, *value, Origin::kOverride};
  }

  for (const auto& spec : schema) {
    const Entry& e = values.entries_.at(spec.key);
    if (spec.required && e.origin == Origin::kDefault) {
      RP_THROW(InputError, "{}: required key '{}' is missing ({})", values.source_, spec.key, spec.help);
    }
  }
  return values;
}

std::string Values::source(std::initializer_list<const char*> keys) const {
  bool file = false, override = false;
  for (const char* key : keys) {
    const auto it = entries_.find(key);
    RP_CHECK(it != entries_.end(), "config key '{}' is not in the schema", key);
    (it->second.origin == Origin::kOverride ? override : file) = true;
  }
  if (file && override) return source_ + " and --set";
  return override ? "--set" : source_;
}

const Values::Entry& Values::entry(const std::string& key, Type type) const {
  const auto it = entries_.find(key);
  RP_CHECK(it != entries_.end(), "config key '{}' is not in the schema", key);
  RP_CHECK(it->second.type == type, "config key '{}' read as {} but declared {}", key, typeName(type),
           typeName(it->second.type));
  return it->second;
}

bool Values::isSet(const std::string& key) const {
  return origin(key) != Origin::kDefault;
}

Origin Values::origin(const std::string& key) const {
  const auto it = entries_.find(key);
  RP_CHECK(it != entries_.end(), "config key '{}' is not in the schema", key);
  return it->second.origin;
}

bool Values::getBool(const std::string& key) const {
  return std::get<bool>(entry(key, Type::kBool).value);
}
std::int64_t Values::getInt(const std::string& key) const {
  return std::get<std::int64_t>(entry(key, Type::kInt).value);
}
double Values::getFloat(const std::string& key) const {
  return std::get<double>(entry(key, Type::kFloat).value);
}
const std::string& Values::getString(const std::string& key) const {
  return std::get<std::string>(entry(key, Type::kString).value);
}
const std::vector<std::string>& Values::getStringList(const std::string& key) const {
  return std::get<std::vector<std::string>>(entry(key, Type::kStringList).value);
}

std::vector<std::string> Values::describe(const std::map<std::string, Value>& replaced,
                                          const std::map<std::string, Value>& derived) const {
  std::vector<std::string> lines;
  for (const auto& [key, e] : entries_) {
    const char* origin = e.origin == Origin::kDefault ? "default" : e.origin == Origin::kFile ? "file" : "--set";
    const auto r = replaced.find(key);
    const auto d = derived.find(key);
    if (e.origin == Origin::kDefault && r != replaced.end() && r->second != e.value) {
      // A default relative path (output.dir's "out"), written as the run resolved it: the file runs from anywhere.
      lines.push_back(fmt::format("{} = {}  # default {}", key, render(r->second), render(e.value)));
    } else if (e.origin ==
               Origin::kDefault) {  // a comment: loaded again, the key keeps its default and derives the same
      lines.push_back(d != derived.end() && d->second != e.value
                          ? fmt::format("# {} = {}  # default; this run: {}", key, render(e.value), render(d->second))
                          : fmt::format("# {} = {}  # default", key, render(e.value)));
    } else if (r != replaced.end() && r->second != e.value) {
      lines.push_back(fmt::format("{} = {}  # {} {}", key, render(r->second), origin, render(e.value)));
    } else if (d != derived.end() && d->second != e.value) {
      lines.push_back(fmt::format("{} = {}  # {} {}, resolved", key, render(d->second), origin, render(e.value)));
    } else {
      lines.push_back(fmt::format("{} = {}  # {}", key, render(e.value), origin));
    }
  }
  return lines;
}

}  // namespace rp::config
