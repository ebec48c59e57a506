#include "cli/command_line.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/run_main.h"
#include "common/version.h"

namespace rp::cli {

CommandLine::Option& CommandLine::Option::required() {
  option_->required();
  return *this;
}

CommandLine::Option& CommandLine::Option::wholeAtLeast(std::int64_t minimum) {
  option_->check(CLI::Validator(
      [minimum](std::string& text) -> std::string {
        std::int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc() && end == text.data() + text.size() && value >= minimum) return "";
        return fmt::format("expected a whole number >= {}, got {}", minimum, text);
      },
      fmt::format("INT>={}", minimum)));
  return *this;
}

CommandLine::Option& CommandLine::Option::positive() {
  option_->check(CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && value > 0) return "";
        return fmt::format("expected a number > 0, got {}", text);
      },
      "NUMBER>0"));
  return *this;
}

CommandLine::Option& CommandLine::Option::range(double low, double high) {
  option_->check(CLI::Range(low, high));
  return *this;
}

CommandLine::Option& CommandLine::Option::oneOf(const std::vector<std::string>& choices) {
  option_->check(CLI::IsMember(choices));
  return *this;
}

CommandLine::Option& CommandLine::Option::delimiter(char separator) {
  option_->delimiter(separator);
  return *this;
}

CommandLine::CommandLine(const std::string& description) : app_(std::make_unique<CLI::App>(description)) {
  app_->set_version_flag("--version", rp::versionLine(), "print roundpipe's version and commit and exit");
}

CommandLine::~CommandLine() = default;

CommandLine::Option CommandLine::option(const std::string& name, std::string& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

CommandLine::Option CommandLine::option(const std::string& name, std::vector<std::string>& values,
                                        const std::string& help) {
  return Option(app_->add_option(name, values, help));
}

CommandLine::Option CommandLine::option(const std::string& name, int& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

CommandLine::Option CommandLine::option(const std::string& name, std::int64_t& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

CommandLine::Option CommandLine::option(const std::string& name, std::uint64_t& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

CommandLine::Option CommandLine::option(const std::string& name, double& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

CommandLine::Option CommandLine::option(const std::string& name, std::vector<double>& values, const std::string& help) {
  return Option(app_->add_option(name, values, help));
}

void CommandLine::flag(const std::string& name, bool& value, const std::string& help) {
  app_->add_flag(name, value, help);
}

std::optional<int> CommandLine::parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app_->exit(e) == 0 ? kExitOk : kExitBadInput;  // CLI11's own codes (106, 109, ...) are not ours
  }
}

}  // namespace rp::cli
