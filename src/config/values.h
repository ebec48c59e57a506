// Configuration values by dotted key ("train.seq_len"), checked against a schema: every key known, every
// value of its declared type. Sources, in order: schema defaults, the TOML file, --set overrides.
// Thread-safety: immutable after loading.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace rp::config {

enum class Type { kBool, kInt, kFloat, kString, kStringList };
const char* typeName(Type type);

using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

struct KeySpec {
  const char* key;
  Type type;
  Value fallback;
  const char* help;
  bool required = false;
};

enum class Origin { kDefault, kFile, kOverride };

class Values {
 public:
  // Loads `tomlPath` (may be empty: defaults only) and applies `overrides` ("key=value"); throws InputError
  // naming the file, key and expected type for unknown keys, wrong types, non-finite numbers (NaN, inf) and
  // missing required keys.
  static Values load(const std::vector<KeySpec>& schema, const std::string& tomlPath,
                     const std::vector<std::string>& overrides);

  bool getBool(const std::string& key) const;
  std::int64_t getInt(const std::string& key) const;
  double getFloat(const std::string& key) const;
  const std::string& getString(const std::string& key) const;
  const std::vector<std::string>& getStringList(const std::string& key) const;
  // Whether the TOML file or a --set override gave `key` (else it holds the schema default).
  bool isSet(const std::string& key) const;
  // Where `key`'s value came from.
  Origin origin(const std::string& key) const;

  // "key = value  # origin" lines, sorted by key, valid TOML that loads back to the same settings: the effective
  // config. Keys left at their default are comments ("# key = value  # default"), so that, loaded again, they stay
  // defaults and derive what they derived; a `derived` value (what the run settled on from several keys) follows
  // such a comment. A key is written with its `replaced` value where that differs (a path made absolute, a default
  // one too), or, set and resolved otherwise by the run, its `derived` one, the comment giving the origin and the
  // value given.
  std::vector<std::string> describe(const std::map<std::string, Value>& replaced = {},
                                    const std::map<std::string, Value>& derived = {}) const;
  // Where the values of `keys` came from, for messages: "--set" for an override, else the TOML file (or
  // "<defaults>"); several origins joined with " and ".
  std::string source(std::initializer_list<const char*> keys) const;

 private:
  struct Entry {
    Type type;
    Value value;
    Origin origin;
  };
  const Entry& entry(const std::string& key, Type type) const;
  std::map<std::string, Entry> entries_;
  std::string source_;
};

}  // namespace rp::config
