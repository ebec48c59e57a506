// One libFuzzer target per parser of user files (docs/testing.md, "Fuzzing"). A target file defines the two
// functions below; fuzz_target.cpp turns them into libFuzzer's entry points. The contract every parser is held
// to: any input ends in a result or in an rp::Error (a clear message); anything else — another exception, a
// crash, a sanitizer report, a leak or a hang — is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rp::fuzz {

// Parses `data` the way a user's file reaches the parser (usually written to a file first).
void fuzzOne(std::string_view data);
// Writes valid example inputs into `dir` (one file each): the seed corpus, besides the fixtures.
void writeSeeds(const std::string& dir);

// Inputs made of several files are their parts joined by kSeparator (tests/fuzz/fuzz.dict has it).
inline constexpr std::string_view kSeparator = "\n--8<--\n";
std::vector<std::string_view> split(std::string_view data);
std::string join(const std::vector<std::string>& parts);

// A directory of this process's own (created once, under $TMPDIR), and `name` in it written with `data`.
const std::string& scratchDir();
std::string writeScratch(const std::string& name, std::string_view data);
void writeSeed(const std::string& dir, const std::string& name, std::string_view data);
// A file's bytes; empty when unreadable.
std::string readFile(const std::string& path);
// The shared fixtures ($RP_FIXTURES_DIR, else the build's default), for seeds: empty
// when absent (the synthetic seeds still go in).
std::string fixturesDir();

}  // namespace rp::fuzz
