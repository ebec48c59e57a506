// Note [One libstdc++] (cmake/RpDependencies.cmake): in a program that links LibTorch, the C++ library
// symbols the torch wheel also exports must be answered by libstdc++.so.6, never by the wheel's static copy.
// dlsym(RTLD_DEFAULT) searches the program's global scope in the order the dynamic linker binds our own calls.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <torch/torch.h>

#include <string>

namespace rp::test {
namespace {

// Where the program's global scope finds `symbol`, or "" if nowhere.
std::string definingLibrary(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The program's loaded objects in load order (the global scope's search order), for the failure message: the
// first H100 machine's GCC 13 build answered from libtorch.so, and which objects came first is what tells why.
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

TEST(LinkOrder, TheSystemLibstdcxxAnswersWhatTheTorchWheelAlsoExports) {
  // A tensor op keeps LibTorch among the program's libraries even where the linker drops unused ones.
  ASSERT_EQ(torch::ones({2}).sum().item<float>(), 2.0F);
  const char* symbols[] = {
      "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",  // fs::remove_all(path, error_code&)
      "_ZNSt10filesystem7__cxx114path14_M_split_cmptsEv",                  // fs::path's parsing
      "_ZNSt10filesystem7__cxx1118directory_iteratorppEv",                 // directory_iterator::operator++
      "_ZNSt15__exception_ptr13exception_ptr10_M_releaseEv",               // std::exception_ptr's release
  };
  for (const char* symbol : symbols) {
    const std::string library = definingLibrary(symbol);
    EXPECT_NE(library.find("libstdc++.so"), std::string::npos)
        << symbol << " is answered by '" << library << "'; the load order:" << loadOrder();
  }
}

}  // namespace
}  // namespace rp::test
