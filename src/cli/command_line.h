// The command line of a roundpipe executable: its options, their checks, parsing, --help. CLI11 does the work,
// behind this class (Note [CLI11 in one source]).
//   rp::cli::CommandLine line{"roundpipe_sim: ..."};
//   line.option("--workers", workers, "workers (GPUs)").wholeAtLeast(1);
//   if (const auto code = line.parse(argc, argv)) return *code;
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace rp::cli {

// Note [CLI11 in one source]: CLI11 (2.1, header-only) compiled into every source that builds a CLI::App cost
// each executable's main ~15 s at -O2 (its parser's inline functions generated again in each; -ftime-report:
// "opt and generate"), five mains on every cold build. This header names no CLI11 type but by declaration, so
// only command_line.cpp compiles CLI11; what the user sees (usage, --help, CLI11's own messages) is CLI11's.
class CommandLine {
 public:
  // One option's settings, chained after CommandLine::option.
  class Option {
   public:
    Option& required();
    // Checks with plain messages ("--max-new-tokens: expected a whole number >= 1, got 0"; CLI11's own range
    // checks print the limits of double).
    Option& wholeAtLeast(std::int64_t minimum);
    Option& positive();
    Option& range(double low, double high);                  // CLI11's Range: low <= value <= high
    Option& oneOf(const std::vector<std::string>& choices);  // CLI11's IsMember
    Option& delimiter(char separator);                       // a list option: several values in one argument

   private:
    friend class CommandLine;
    explicit Option(CLI::Option* option) : option_(option) {}
    CLI::Option* option_;
  };

  explicit CommandLine(const std::string& description);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // `name` "--flag-name" for an option, a bare word for a positional argument. The variable keeps its value
  // when the option is absent (that is its default, shown by --help).
  Option option(const std::string& name, std::string& value, const std::string& help);
  Option option(const std::string& name, std::vector<std::string>& values, const std::string& help);
  Option option(const std::string& name, int& value, const std::string& help);
  Option option(const std::string& name, std::int64_t& value, const std::string& help);
  Option option(const std::string& name, std::uint64_t& value, const std::string& help);
  Option option(const std::string& name, double& value, const std::string& help);
  Option option(const std::string& name, std::vector<double>& values, const std::string& help);
  void flag(const std::string& name, bool& value, const std::string& help);

  // nullopt to go on, or the exit code to return now: 0 after --help; kExitBadInput (cli/run_main.h) after a
  // usage error, which CLI11 prints with the usage.
  std::optional<int> parse(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace rp::cli
