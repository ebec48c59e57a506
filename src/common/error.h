// The error policy (docs/errors.md): exceptions carry what went wrong, where (file, field, tensor, rank)
// and what was expected. InputError is the user's to fix; InternalError is ours (a broken invariant).
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/ranges.h>

#include "common/fmt.h"

namespace rp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input: a file, config field, tensor or argument that is not what we expect.
class InputError : public Error {
 public:
  using Error::Error;
};

// A failed system or vendor call (MPI, CUDA, HDF5, POSIX); the message names the call and its arguments.
class SystemError : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside roundpipe: a bug, never the user's input.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Out of line on purpose: fmt::format is expanded only at call sites (docs/building.md, "fmt").
[[noreturn]] void throwInternal(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace rp

// Invariant check; the message says what should have held. Not for user input (throw InputError).
#define RP_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) ::rp::detail::throwInternal(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws `Type` (an rp::Error) with a fmt-formatted message.
#define RP_THROW(Type, ...) throw Type(fmt::format(__VA_ARGS__))
