# Every third-party dependency is found here, once. scripts/bootstrap.sh installs them.
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(HDF5 REQUIRED COMPONENTS C CXX)
find_package(ZLIB REQUIRED)                      # checkpoint checksums (crc32)
find_package(Threads REQUIRED)
find_package(ICU REQUIRED COMPONENTS uc i18n)   # tokenizer: NFC and pre-tokenizer regexes

# Note [One fmt]: every translation unit formats with Debian's fmt, compiled once (libfmt.so). Header-only fmt
# compiled its formatting core into every unit that formatted anything, ~5 s of -O2 a unit, a quarter of the
# cold build (docs/building.md, "Two fmt versions"). LibTorch's include directory bundles a newer fmt, which
# would shadow Debian's in torch-using units, so Debian's fmt directory is reached through a link in the build
# tree, a system directory that rp_fmt's users see first: rp_torch names rp_fmt before LibTorch.
# src/common/fmt.h stops the build of any unit that sees another fmt. The LibTorch headers we include use none.
add_library(rp_fmt INTERFACE)
get_target_property(_rp_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET _rp_fmt_include 0 _rp_fmt_include)
file(MAKE_DIRECTORY "${PROJECT_BINARY_DIR}/fmt-include")
file(CREATE_LINK "${_rp_fmt_include}/fmt" "${PROJECT_BINARY_DIR}/fmt-include/fmt" SYMBOLIC)
target_include_directories(rp_fmt SYSTEM INTERFACE "${PROJECT_BINARY_DIR}/fmt-include")
string(REGEX MATCHALL "[0-9]+" _rp_fmt_version "${fmt_VERSION}")
list(GET _rp_fmt_version 0 _rp_fmt_major)
list(GET _rp_fmt_version 1 _rp_fmt_minor)
list(GET _rp_fmt_version 2 _rp_fmt_patch)
math(EXPR _rp_fmt_number "${_rp_fmt_major} * 10000 + ${_rp_fmt_minor} * 100 + ${_rp_fmt_patch}")
target_compile_definitions(rp_fmt INTERFACE RP_FMT_VERSION=${_rp_fmt_number})
target_link_libraries(rp_fmt INTERFACE fmt::fmt)

# --- LibTorch, from the torch wheel in the project venv -----------------------------------------
if(NOT EXISTS "${RP_PYTHON}")
  message(FATAL_ERROR "RP_PYTHON=${RP_PYTHON} does not exist: run scripts/bootstrap.sh first "
                      "(it creates .venv with the pinned torch wheel), or pass -DRP_PYTHON=<python with torch>")
endif()
execute_process(
  COMMAND "${RP_PYTHON}" -c "import torch, os; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__)))"
  OUTPUT_VARIABLE _rp_torch_out OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _rp_torch_rc ERROR_VARIABLE _rp_torch_err)
if(NOT _rp_torch_rc EQUAL 0)
  message(FATAL_ERROR "cannot import torch with ${RP_PYTHON}: ${_rp_torch_err}")
endif()
string(REPLACE "\n" ";" _rp_torch_out "${_rp_torch_out}")
list(GET _rp_torch_out 0 _rp_torch_prefix)
list(GET _rp_torch_out 1 RP_SITE_PACKAGES)
list(APPEND CMAKE_PREFIX_PATH "${_rp_torch_prefix}")

# The CUDA parts of our own code are torch-free and C++17 (CMake 3.25 has no CUDA20 dialect for nvcc 13).
set(CMAKE_CUDA_STANDARD 17)
# Architectures: Turing .. Hopper. "native" fails on machines without a GPU, and LibTorch's own
# detection would try to run a GPU probe, so both lists are set explicitly.
set(RP_CUDA_ARCHITECTURES "75;80;86;89;90" CACHE STRING "CUDA architectures for roundpipe's CUDA code")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "7.5;8.0;8.6;8.9;9.0")
endif()
find_package(Torch REQUIRED)
message(STATUS "roundpipe: LibTorch ${Torch_VERSION} from ${_rp_torch_prefix}")

# The CUDA wheel's libtorch_cuda needs the NCCL/cuBLAS/... shipped as nvidia-* wheels; the linker must
# resolve them there (its RPATH uses $ORIGIN), not in /usr/local/cuda, whose NCCL may be older.
file(GLOB RP_TORCH_NVIDIA_LIBDIRS LIST_DIRECTORIES true "${RP_SITE_PACKAGES}/nvidia/*/lib")
# rp_torch is LibTorch without its CUDA kernels (libtorch_cuda.so): a program that may run the CUDA backend
# loads them at run time where a driver is (Note [LibTorch's CUDA kernels], device/cuda/torch_cuda.cpp); the GPU
# tier's tests link them (rp_torch_cuda). The compile side is the `torch` target's (rp_torch_headers: its include
# directories and flags), named after rp_fmt (Note [One fmt]).
add_library(rp_torch_headers INTERFACE)
target_include_directories(rp_torch_headers SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
if(TORCH_CXX_FLAGS)
  separate_arguments(_rp_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(rp_torch_headers INTERFACE ${_rp_torch_flags})
endif()
add_library(rp_torch INTERFACE)
target_link_libraries(rp_torch INTERFACE rp_fmt rp_torch_headers torch_cpu_library c10)
if(TARGET torch_cuda_library)
  add_library(rp_torch_cuda INTERFACE)
  target_link_libraries(rp_torch_cuda INTERFACE rp_torch torch_cuda_library)
endif()
# Note [One libstdc++]: the torch wheels export the parts of libstdc++ they link statically (all of
# std::filesystem, exception_ptr's reference count; pytorch/pytorch#133437). The dynamic linker binds each
# symbol to the first library of the program's list that defines it, and libtorch_cpu.so comes before
# libstdc++.so.6, so our std::filesystem calls ran the wheel's copy against objects built by our compiler.
# Naming libstdc++ ahead of everything else makes the system's copy serve the program and LibTorch alike
# (tests/unit/test_link_order.cpp checks which library answers).
target_link_options(rp_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
if(RP_TORCH_NVIDIA_LIBDIRS)
  list(JOIN RP_TORCH_NVIDIA_LIBDIRS ":" _rp_nv)
  target_link_options(rp_torch INTERFACE "LINKER:-rpath-link,${_rp_nv}")
endif()

# --- CUDA: compiled and linked whenever the toolkit is present, even without a GPU ----------------
if(RP_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
if(RP_WITH_NCCL)
  # Prefer the NCCL that LibTorch loads (nvidia-nccl wheel) so one libnccl.so.2 serves both.
  find_path(RP_NCCL_INCLUDE_DIR nccl.h HINTS "${RP_SITE_PACKAGES}/nvidia/nccl/include" ${CUDAToolkit_INCLUDE_DIRS})
  find_library(RP_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS "${RP_SITE_PACKAGES}/nvidia/nccl/lib" ${CUDAToolkit_LIBRARY_DIR})
  if(NOT RP_NCCL_INCLUDE_DIR OR NOT RP_NCCL_LIBRARY)
    message(FATAL_ERROR "RP_WITH_NCCL=ON but nccl.h/libnccl were not found (looked in the nvidia-nccl wheel and "
                        "${CUDAToolkit_LIBRARY_DIR}); install NCCL or configure with -DRP_WITH_NCCL=OFF")
  endif()
  add_library(rp_nccl INTERFACE)
  target_include_directories(rp_nccl SYSTEM INTERFACE ${RP_NCCL_INCLUDE_DIR})
  target_link_libraries(rp_nccl INTERFACE ${RP_NCCL_LIBRARY})
endif()
