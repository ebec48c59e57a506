#include "world/mpi_transport.h"

#include <link.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rp {
namespace {

int collect(struct dl_phdr_info* info, std::size_t, void* out) {
  const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
  static_cast<std::vector<std::string>*>(out)->push_back(path.substr(path.find_last_of('/') + 1));
  return 0;
}

std::string envOr(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

std::string describeMpiTransport(const std::string& library, const std::vector<std::string>& loaded,
                                 const std::vector<std::string>& env) {
  const std::regex component(R"(mca_(pml|btl)_([A-Za-z0-9]+)\.so)");
  std::vector<std::string> pmls, btls;
  for (const auto& name : loaded) {
    std::smatch m;
    if (!std::regex_match(name, m, component)) continue;
    (m[1] == "pml" ? pmls : btls).push_back(m[2]);
  }
  std::sort(btls.begin(), btls.end());
  const auto setting = [&](std::size_t i, const char* what, const char* unset) {
    return fmt::format("{} {}", what, i < env.size() && !env[i].empty() ? env[i] : unset);
  };
  std::string pml;
  if (pmls.empty()) {
    pml = "PML unknown (no mca_pml_*.so mapped: a static build?)";
  } else if (std::find(pmls.begin(), pmls.end(), "ucx") != pmls.end()) {
    pml = fmt::format("PML ucx ({}, {})", setting(0, "UCX_TLS", "UCX's choice"),
                      setting(1, "UCX_NET_DEVICES", "every device"));
  } else {
    pml = fmt::format("PML {} over BTLs {} ({})", fmt::join(pmls, ", "), fmt::join(btls, ", "),
                      setting(2, "btl_tcp_if_include", "every interface"));
  }
  return fmt::format("{}; {}", library, pml);
}

std::string describeMpiTransport() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<std::size_t>(length));
  library = library.substr(0, library.find_first_of(",\n"));  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
  std::vector<std::string> loaded;
  dl_iterate_phdr(collect, &loaded);
  return describeMpiTransport(library, loaded,
                              {envOr("UCX_TLS"), envOr("UCX_NET_DEVICES"), envOr("OMPI_MCA_btl_tcp_if_include")});
}

}  // namespace rp
