// Which of Open MPI's point-to-point layers a job runs on, for the run's first lines (docs/launch.md, "ob1/TCP or
// UCX"): the PML (ob1 over its BTLs, or UCX) and what steers it, read from the MCA components and UCX modules
// mapped into this process after MPI_Init — Open MPI unloads the components its selection did not keep.
#pragma once

#include <string>
#include <vector>

namespace rp {

// "Open MPI v4.1.4; PML ob1 over BTLs self, sm, tcp, vader" or "...; PML ucx (UCX_TLS ..., UCX_NET_DEVICES ...)",
// from the library version, the loaded shared objects' names (`loaded`) and the environment's settings. Call
// after MPI_Init.
std::string describeMpiTransport();
// The same from given names (tests): `library` as MPI_Get_library_version's first line, `loaded` shared object
// file names, `env` the values of UCX_TLS, UCX_NET_DEVICES and OMPI_MCA_btl_tcp_if_include (empty = unset).
std::string describeMpiTransport(const std::string& library, const std::vector<std::string>& loaded,
                                 const std::vector<std::string>& env);

}  // namespace rp
