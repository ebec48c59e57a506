#include "support/crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/env.h"

namespace rp::test {
namespace {

void describe(const char* what, void* address) {
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
    const auto base = reinterpret_cast<std::uintptr_t>(info.dli_saddr ? info.dli_saddr : info.dli_fbase);
    std::fprintf(stderr, "crash report: %s %p = %s+0x%zx in %s\n", what, address,
                 info.dli_sname ? info.dli_sname : "(no symbol)",
                 static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(address) - base), info.dli_fname);
  } else {
    std::fprintf(stderr, "crash report: %s %p (in no loaded object)\n", what, address);
  }
}

// A crashing process: not async-signal-safe throughout (fprintf, dladdr), which is acceptable on the way out.
void onCrash(int signal, siginfo_t* info, void* context) {
  std::fprintf(stderr, "crash report: signal %d (%s), fault address %p\n", signal, strsignal(signal), info->si_addr);
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  describe("pc", pc);
  if (pc == nullptr) {
    // A call through a null pointer: the call pushed its return address, which names the caller.
    describe("called from", *reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]));
  }
#else
  (void)context;
#endif
  void* frames[48];
  const int n = backtrace(frames, 48);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(signal, &fallback, nullptr);
  raise(signal);
}

}  // namespace

void installCrashReport() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (env::get(env::kCrashReport) != "1") return;
    static char altStack[64 * 1024];  // a crash from a stack overflow still gets its report
    stack_t stack{};
    stack.ss_sp = altStack;
    stack.ss_size = sizeof(altStack);
    sigaltstack(&stack, nullptr);
    struct sigaction action {};
    action.sa_sigaction = onCrash;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int signal : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(signal, &action, nullptr);
  });
}

}  // namespace rp::test
