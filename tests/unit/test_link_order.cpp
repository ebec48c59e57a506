// Note [One libstdc++] (cmake/RpDependencies.cmake): in a program that links LibTorch, our own calls into the
// C++ library parts the torch wheel also exports must reach a libstdc++ built for our objects — the system's
// libstdc++.so.6, or a copy linked into the program itself (a toolchain that links libstdc++ statically; the H100
// machines' GCC 13 builds do not list libstdc++.so.6, docs/gpu.md) — never the wheel's copy.
// The address our code takes of a function is the one the dynamic linker bound its calls to (the GOT entry),
// so the object holding that address is the copy our calls run.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "model/libtorch.h"

namespace rp::test {
namespace {

int inTheProgram() {
  return 1;
}

// The object that holds `address`: its path, or "(the program)" for the program itself.
std::string objectOf(const void* address) {
  Dl_info info{}, program{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  if (dladdr(reinterpret_cast<const void*>(&inTheProgram), &program) != 0 && info.dli_fbase == program.dli_fbase) {
    return "(the program)";
  }
  return info.dli_fname;
}

// The program's loaded objects in load order (the global scope's search order), for the failure message.
std::string loadOrder() {
  std::string order;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        auto& text = *static_cast<std::string*>(out);
        text += "\n  ";
        text += (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') ? info->dlpi_name : "(the program)";
        return 0;
      },
      &order);
  return order;
}

TEST(LinkOrder, OurCallsIntoWhatTheTorchWheelAlsoExportsReachOurLibstdcxx) {
  // A tensor op keeps LibTorch among the program's libraries even where the linker drops unused ones.
  ASSERT_EQ(torch::ones({2}).sum().item<float>(), 2.0F);
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  using TempDirectory = std::filesystem::path (*)(std::error_code&);
  const std::pair<const char*, const void*> ours[] = {
      {"std::filesystem::remove_all",
       reinterpret_cast<const void*>(static_cast<RemoveAll>(&std::filesystem::remove_all))},
      {"std::filesystem::temp_directory_path",
       reinterpret_cast<const void*>(static_cast<TempDirectory>(&std::filesystem::temp_directory_path))},
  };
  std::string copy;  // the copy the first of them reached
  for (const auto& [name, address] : ours) {
    const std::string object = objectOf(address);
    EXPECT_TRUE(object.find("libstdc++.so") != std::string::npos || object == "(the program)")
        << "our calls to " << name << " run the copy in '" << object << "'; the load order:" << loadOrder();
    if (copy.empty()) copy = object;
    EXPECT_EQ(object, copy) << name << " and " << ours[0].first << " reach different copies";
  }
  if (copy.find("libstdc++.so") == std::string::npos) return;  // linked in: exception_ptr's copy is ours too
  // Linked dynamically: exception_ptr's reference count (a private member our inline code calls) is bound by
  // the same rule; dlsym(RTLD_DEFAULT) searches the global scope in the order that binding uses.
  const char* release = "_ZNSt15__exception_ptr13exception_ptr10_M_releaseEv";
  Dl_info info{};
  void* address = dlsym(RTLD_DEFAULT, release);
  ASSERT_NE(address, nullptr) << release;
  ASSERT_NE(dladdr(address, &info), 0) << release;
  EXPECT_NE(std::string(info.dli_fname).find("libstdc++.so"), std::string::npos)
      << release << " is answered by '" << info.dli_fname << "'; the load order:" << loadOrder();
}

}  // namespace
}  // namespace rp::test
