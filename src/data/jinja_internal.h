// Internals of the Jinja subset (data/jinja.h), shared by its files. Internal to data/:
//   jinja_value.cpp     values, Python's str/repr/json.dumps of them, template errors
//   jinja_builtins.cpp  operators, attribute and item access, methods, filters, tests
//   jinja_expr.cpp      the expression lexer, expression nodes and their parser
//   jinja.cpp           statements, splitting text from tags (transformers' whitespace settings), Template
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>

namespace rp::data::jinja::detail {

// ---- Values -------------------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
struct Where;
// A callable: positional and named arguments, and where it is called (its errors name that line).
using Function = std::function<Value(const std::vector<Value>&, const Dict&, const Where&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;  // shared: a namespace() is changed through every reference to it
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;
  bool isNamespace = false;  // a namespace(): the only dict `set x.attr = ...` may change

  static Value none() { return make(Kind::kNone); }
  static Value boolean(bool v) {
    Value x = make(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value integer(std::int64_t v) {
    Value x = make(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value real(double v) {
    Value x = make(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = make(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value ofList(List v) {
    Value x = make(Kind::kList);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value ofDict(Dict v) {
    Value x = make(Kind::kDict);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value function(Function f) {
    Value x = make(Kind::kFunction);
    x.fn = std::make_shared<Function>(std::move(f));
    return x;
  }
  static Value make(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  bool defined() const { return kind != Kind::kUndefined; }
  bool number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double asDouble() const { return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i); }
  const Value* find(const std::string& key) const {
    if (kind != Kind::kDict) return nullptr;
    for (const auto& [k, v] : *dict) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

const char* kindName(Value::Kind k);
Value fromJson(const nlohmann::json& j);
// Python's json.dumps: ", " and ": " separators, or indented by `indent` spaces when it is >= 0.
std::string toJson(const Value& v, int indent, int depth = 0);
// Python's str().
std::string str(const Value& v);
// Python's repr, for lists and dicts printed whole.
std::string repr(const Value& v);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);

// ---- Template errors ------------------------------------------------------------------------------------

struct Where {
  const std::string* name = nullptr;
  int line = 0;
};

// An InputError naming the template and the line.
[[noreturn]] void fail(const Where& w, const std::string& what);

inline const std::string kWhitespace = " \t\n\r\f\v";
// Strings and lists a template builds are bounded: a template that doubles a string in a loop fails, not the host.
inline constexpr std::size_t kMaxSize = std::size_t{1} << 26;

// ---- Operators and built-ins (jinja_builtins.cpp) ----------------------------------------------------------

Value attribute(const Value& obj, const std::string& name, const Where& w);
Value item(const Value& obj, const Value& key, const Where& w);
std::string stripChars(const std::string& s, const std::string& chars, bool left, bool right);
Value callMethod(const Value& obj, const std::string& name, const std::vector<Value>& args, const Where& w);
bool contains(const Value& container, const Value& x, const Where& w);
// `text` as a string value, or an error past kMaxSize.
Value concatenated(std::string text, const Where& w);
Value arithmetic(const std::string& op, const Value& a, const Value& b, const Where& w);
Value applyFilter(const std::string& name, const Value& v, const std::vector<Value>& args, const Dict& named,
                  const Where& w);
bool applyTest(const std::string& name, const Value& v, const std::vector<Value>& args, const Where& w);

// ---- Expressions (jinja_expr.cpp) -------------------------------------------------------------------------

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind = Kind::kEnd;
  std::string text;
};

std::vector<Token> lexExpression(const std::string& src, const Where& w);

class Context;

struct Expr {
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
  Where where;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

class Context {
 public:
  explicit Context(Dict globals) { scopes_.push_back(std::move(globals)); }
  Value lookup(const std::string& key) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      for (const auto& [k, v] : *s) {
        if (k == key) return v;
      }
    }
    return Value();
  }
  void set(const std::string& key, Value v) {
    auto& scope = scopes_.back();
    for (auto& [k, old] : scope) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    scope.emplace_back(key, std::move(v));
  }
  // Every loop iteration counts; a template that loops past the budget (a conversation needs a few per message)
  // is an error, not a hang.
  void step(const Where& w) {
    if (++steps_ > kStepBudget) fail(w, fmt::format("the template loops more than {} times", kStepBudget));
  }
  void push() { scopes_.emplace_back(); }
  void pop() { scopes_.pop_back(); }
  // Macro calls in progress: a template that recurses without end fails, not the stack.
  int macroDepth = 0;
  static constexpr int kMaxMacroDepth = 64;
  std::string out;
  std::vector<std::pair<std::size_t, std::size_t>> generation;

 private:
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  static constexpr std::int64_t kStepBudget = 2'000;  // the same check, reached before an execution gets slow
#else
  static constexpr std::int64_t kStepBudget = 100'000;
#endif
  std::int64_t steps_ = 0;
  std::vector<Dict> scopes_;
};

class ExpressionParser {
 public:
  ExpressionParser(std::vector<Token> tokens, Where w) : t_(std::move(tokens)), w_(w) {}

  ExprPtr parse() { return expression(); }
  bool atEnd() const { return peek().kind == Token::Kind::kEnd; }
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool acceptName(const char* name) {
    if (peek().kind == Token::Kind::kName && peek().text == name) {
      ++p_;
      return true;
    }
    return false;
  }
  bool acceptOp(const char* op) {
    if (peek().kind == Token::Kind::kOp && peek().text == op) {
      ++p_;
      return true;
    }
    return false;
  }
  void expectOp(const char* op) {
    if (!acceptOp(op)) fail(w_, fmt::format("expected '{}', found '{}'", op, peek().text));
  }
  std::string name() {
    if (peek().kind != Token::Kind::kName) fail(w_, fmt::format("expected a name, found '{}'", peek().text));
    return t_[p_++].text;
  }
  void expectEnd() {
    if (!atEnd()) fail(w_, fmt::format("unexpected '{}'", peek().text));
  }
  ExprPtr expression();

 private:
  template <typename T>
  std::unique_ptr<T> make();
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r);
  ExprPtr orExpr();
  ExprPtr andExpr();
  ExprPtr notExpr();
  ExprPtr compare();
  ExprPtr concat();
  ExprPtr sum();
  ExprPtr product();
  ExprPtr unary();
  Arguments arguments();  // after '('
  ExprPtr postfix(ExprPtr e);
  ExprPtr primary();

  // Nesting is bounded (parentheses, unary operators, lists), so a hostile template fails instead of overflowing
  // the stack.
  struct Nest;
  static constexpr int kMaxDepth = 64;
  std::vector<Token> t_;
  std::size_t p_ = 0;
  Where w_;
  int depth_ = 0;
};

}  // namespace rp::data::jinja::detail
