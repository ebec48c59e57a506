// A test binary's crash, told where it happened: with RP_CRASH_REPORT=1 (scripts/gpu-check.sh sets it), a
// SIGSEGV, SIGBUS, SIGILL or SIGFPE prints the faulting address, the code it happened in — and, where the
// program called a null function pointer (pc 0, where a debugger shows no frames), the function that made the
// call — resolved through the dynamic symbol tables, then the signal's default action ends the process.
// For machines without a debugger that works (the GPU machines: docs/gpu.md). Not under the sanitizers, whose
// own handlers report better.
#pragma once

namespace rp::test {

// Installs the handler once per process when RP_CRASH_REPORT=1; otherwise does nothing.
void installCrashReport();

}  // namespace rp::test
