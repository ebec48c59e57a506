# Build options. docs/building.md lists them; keep the two in step.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_rp_cuda_default ON)
else()
  set(_rp_cuda_default OFF)
endif()

option(RP_WITH_CUDA "Build the CUDA backend (needs the CUDA toolkit; runs only where a GPU is present)" ${_rp_cuda_default})
option(RP_WITH_NCCL "Link NCCL for inter-GPU collectives (needs RP_WITH_CUDA)" ${RP_WITH_CUDA})
option(RP_WERROR "Treat compiler warnings as errors (on in CI)" OFF)
option(RP_BUILD_TESTS "Build the test tiers" ON)
option(RP_BUILD_BENCHMARKS "Build benchmarks/" ON)
option(RP_USE_PCH "Precompile torch/torch.h for the torch-using targets" ON)
option(RP_UNITY_BUILD "Compile each library's sources in batches of 4 (unity build): a faster full build" ON)
set(RP_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined | thread | empty for none")
option(RP_FUZZ "Build the libFuzzer targets in tests/fuzz (clang; implies RP_SANITIZE=address,undefined)" OFF)
set(RP_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python of the project venv: supplies LibTorch (torch.utils.cmake_prefix_path) and the reference scripts")

if(RP_WITH_NCCL AND NOT RP_WITH_CUDA)
  message(FATAL_ERROR "RP_WITH_NCCL=ON needs RP_WITH_CUDA=ON")
endif()

# Sanitizer builds (docs/testing.md, "Sanitizers"): every target of the build is instrumented; LibTorch,
# Open MPI and HDF5 are not (reports inside them are out of reach, and suppressed where they are noise).
if(RP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "RP_FUZZ=ON needs clang (libFuzzer): configure with CC=clang CXX=clang++")
  endif()
  if(NOT RP_SANITIZE)
    set(RP_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
  # libFuzzer's convention: code may shrink its work limits under this macro so that executions stay fast.
  add_compile_options(-fsanitize=fuzzer-no-link)
  add_compile_definitions(FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION)
endif()
if(RP_SANITIZE)
  if(NOT RP_SANITIZE MATCHES "^(address,undefined|address|undefined|thread)$")
    message(FATAL_ERROR "RP_SANITIZE=${RP_SANITIZE}: expected address,undefined | address | undefined | thread")
  endif()
  add_compile_options(-fsanitize=${RP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${RP_SANITIZE})
endif()

# ccache, set up so that a fresh clone elsewhere hits the cache an earlier build filled (docs/building.md):
# paths under the source tree hashed relative to it (base_dir, no cwd in the hash for -g builds), and the
# precompiled headers' objects cacheable (CMake includes the header with -include; pch_defines, time_macros).
# C++ in depend mode: a miss compiles at once and keys the result on the compiler's own dependency list (-MD,
# which Ninja asks for anyway) instead of running the preprocessor first, 1-3 s of every cold compile here. A
# precompiled header's contents are not in that list, but ccache hashes the .gch itself whenever a source
# includes a header that has one (checked: changing the header changes the object, not a stale hit).
find_program(RP_CCACHE ccache)
if(RP_CCACHE)
  set(_rp_ccache_env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=true
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime)
  set(CMAKE_CXX_COMPILER_LAUNCHER env ${_rp_ccache_env} CCACHE_DEPEND=true ${RP_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER env ${_rp_ccache_env} ${RP_CCACHE})
endif()

# mold where it is installed (scripts/bootstrap.sh installs it): every test binary and tool links LibTorch,
# and mold links one in a third of GNU ld's time (unit_torch_tests: 3.7 -> 1.05 s on our 2-core machines).
find_program(RP_MOLD mold)
if(RP_MOLD AND ((CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.1)
                OR CMAKE_CXX_COMPILER_ID STREQUAL "Clang"))
  add_link_options(-fuse-ld=mold)
endif()

# Warnings for our own targets (third-party headers come in as -isystem).
add_library(rp_warnings INTERFACE)
target_compile_options(rp_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${RP_WERROR}>>:-Werror>
  # g++ takes a type of an anonymous namespace in a class of a file that a unity source includes for one shared
  # between translation units; each class here is still defined in one source only.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<BOOL:${RP_UNITY_BUILD}>>:-Wno-subobject-linkage>)
