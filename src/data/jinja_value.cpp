#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/jinja_internal.h"

namespace rp::data::jinja::detail {

const char* kindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kFunction:
      return "function";
  }
  return "?";
}

Value fromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(fromJson(e));
      return Value::ofList(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.emplace_back(k, fromJson(v));
      return Value::ofDict(std::move(d));
    }
    default:
      return Value();
  }
}

// Python's repr of a float (shortest round trip, always with a '.' or an exponent).
std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Python's json.dumps(ensure_ascii=False) of a string.
std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toJson(const Value& v, int indent, int depth) {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * depth), ' ') : "";
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return v.b ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return std::isfinite(v.f) ? floatText(v.f) : (std::isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity");
    case Value::Kind::kString:
      return jsonString(v.s);
    case Value::Kind::kList: {
      if (v.list->empty()) return "[]";
      std::string out = "[";
      for (std::size_t k = 0; k < v.list->size(); ++k)
        out += (k ? comma : "") + nl + toJson((*v.list)[k], indent, depth + 1);
      return out + close + "]";
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) return "{}";
      std::string out = "{";
      for (std::size_t k = 0; k < v.dict->size(); ++k) {
        const auto& [key, value] = (*v.dict)[k];
        out += (k ? comma : "") + nl + jsonString(key) + ": " + toJson(value, indent, depth + 1);
      }
      return out + close + "}";
    }
    case Value::Kind::kFunction:
      return "null";
  }
  return "null";
}

std::string str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return floatText(v.f);
    case Value::Kind::kString:
      return v.s;
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::kString) {
    std::string out = "'";
    for (const char c : v.s) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  if (v.kind == Value::Kind::kList) {
    std::string out = "[";
    for (std::size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
    return out + "]";
  }
  if (v.kind == Value::Kind::kDict) {
    std::string out = "{";
    for (std::size_t k = 0; k < v.dict->size(); ++k) {
      out += (k ? ", " : "") + repr(Value::string((*v.dict)[k].first)) + ": " + repr((*v.dict)[k].second);
    }
    return out + "}";
  }
  return str(v);
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  const bool an = a.number() || a.kind == Value::Kind::kBool, bn = b.number() || b.kind == Value::Kind::kBool;
  if (an && bn) return a.asDouble() == b.asDouble();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    case Value::Kind::kFunction:
      return a.fn == b.fn;
    default:
      return true;  // none == none, undefined == undefined
  }
}

[[noreturn]] void fail(const Where& w, const std::string& what) {
  RP_THROW(InputError, "chat template {}: line {}: {}", *w.name, w.line, what);
}

}  // namespace rp::data::jinja::detail
