# Test registration. Every CTest test carries a label (unit, mpi, golden, gpu) and a timeout.
if(NOT RP_BUILD_TESTS)
  return()
endif()
find_package(GTest REQUIRED)
include(RpUnity)

set(RP_DEFAULT_FIXTURES_DIR "${PROJECT_SOURCE_DIR}/../shared/fixtures" CACHE PATH
    "Shared test fixtures (RP_FIXTURES_DIR in the environment overrides it)")

# The gtest main of every rp_gtest binary: a process where every selected case skipped exits 77, which its
# CTest test declares a skip; one whose filter selects nothing fails (tests/support/gtest_main.cpp).
add_library(rp_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/support/gtest_main.cpp)
target_link_libraries(rp_gtest_main PUBLIC GTest::gtest PRIVATE rp_warnings)

# Note [One process per suite]
# A process that links LibTorch spends ~0.6 s of CPU starting (its operator registry) before a case runs, and
# most cases take less, so one CTest test per gtest case spent more of the suite starting processes than
# testing. rp_gtest registers one CTest test per gtest test suite, `<label>.<Suite>` (parameterised:
# `<label>.<Prefix>/<Suite>`), which runs the binary with --gtest_filter=<Suite>.*: its cases run in one
# process, one after another, as they do when the binary runs alone. The suites are listed after each link
# (cmake/RpGtestSuites.cmake); TIMEOUT is per case, so a suite gets TIMEOUT x its cases, at most
# max(TIMEOUT, 600) s. Binaries whose cases take seconds each keep one test per case (PER_CASE), so that
# ctest spreads them over its slots: the in-process pipeline (~10 s a case), the export round trips (a Python
# process each) and the gpu tier (on a GPU machine its cases run side by side within the GPU check's budget;
# without a GPU each skips at once).

# Note [Test binaries]
# Every translation unit that uses LibTorch pays for its headers even when they are precompiled (~6.6 s of
# template instantiation at the end of the unit, Note [LibTorch headers] in src/model/libtorch.h), and every
# binary pays a link against it: the unit tests that use LibTorch are one binary (unit_torch_tests), those that
# do not another (unit_tests: a process that does not load LibTorch starts in milliseconds, one that does in
# ~0.8 s, and CTest starts one per suite), the goldens' cases a third (golden_tests), their sources compiled in
# unity batches (cmake/RpUnity.cmake) like the libraries'. A binary of its own for what needs one: the
# link-order check (built alone by scripts/gpu-check.sh) and the per-case binaries (the in-process pipeline, the
# export round trips, the gpu tier, which scripts/gpu-check.sh builds target by target). Source files stay one
# per subject; in a batch they share one translation unit, so their file-local names must differ.

# rp_gtest(<name> LABEL <label> SOURCES ... LIBS ... [TORCH] [PER_CASE] [ENV k=v ...] [TIMEOUT s] [FIXTURES ...]
#          [LONG pattern] [LOCK resource])
# One gtest binary whose test suites (or, with PER_CASE, cases) become CTest tests. TORCH reuses rp_model's
# precompiled header; with RP_UNITY_BUILD the sources compile in batches (Note [Test binaries]). With PER_CASE,
# the cases matching the gtest pattern LONG are labelled long instead (only in `scripts/test.sh --all`). LOCK: a
# CTest RESOURCE_LOCK every test of the binary holds (e.g. cores, as the MPI tests do).
function(rp_gtest name)
  cmake_parse_arguments(arg "TORCH;PER_CASE" "LABEL;TIMEOUT;LONG;LOCK" "SOURCES;LIBS;ENV;FIXTURES" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LIBS} rp_test_support rp_gtest_main rp_warnings)
  set_property(GLOBAL APPEND PROPERTY RP_TIER_TARGETS_${arg_LABEL} ${name})
  if(arg_TORCH AND RP_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM rp_model)
  endif()
  if(RP_UNITY_BUILD)
    rp_unity(${name})
  endif()
  rp_gtest_tests(${name})
endfunction()

# The binary's CTest tests (Note [One process per suite]; PER_CASE: one per case): its cases are listed after
# each link (cmake/RpGtestSuites.cmake), and the include file written here turns them into tests when ctest reads
# the directory. Every test skips by exit code (SKIP_RETURN_CODE 77, tests/support/gtest_main.cpp), never by a
# pattern in its output, which would let a failing case beside a skipped one read as a skip.
macro(rp_gtest_tests name)
  if(arg_LONG AND NOT arg_PER_CASE)
    message(FATAL_ERROR "rp_gtest(${name}): LONG needs PER_CASE")
  endif()
  set(suites_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_suites.cmake")
  set(per_case OFF)
  if(arg_PER_CASE)
    set(per_case ON)
  endif()
  add_custom_command(TARGET ${name} POST_BUILD BYPRODUCTS "${suites_file}"
                     COMMAND ${CMAKE_COMMAND} -D "TEST_EXECUTABLE=$<TARGET_FILE:${name}>"
                             -D "SUITES_FILE=${suites_file}" -D DISCOVERY_TIMEOUT=60 -D PER_CASE=${per_case}
                             -D "LONG_FILTER=${arg_LONG}"
                             -P "${PROJECT_SOURCE_DIR}/cmake/RpGtestSuites.cmake"
                     VERBATIM)
  set(rp_executable "$<TARGET_FILE:${name}>")
  set(rp_label "${arg_LABEL}")
  set(rp_timeout "${arg_TIMEOUT}")
  set(rp_longest 600)
  if(arg_TIMEOUT GREATER 600)
    set(rp_longest ${arg_TIMEOUT})
  endif()
  set(rp_properties "SKIP_RETURN_CODE 77 WORKING_DIRECTORY [==[${CMAKE_CURRENT_BINARY_DIR}]==]")
  if(arg_ENV)
    string(APPEND rp_properties " ENVIRONMENT [==[${arg_ENV}]==]")
  endif()
  if(arg_FIXTURES)
    string(APPEND rp_properties " FIXTURES_REQUIRED [==[${arg_FIXTURES}]==]")
  endif()
  if(arg_LOCK)
    string(APPEND rp_properties " RESOURCE_LOCK [==[${arg_LOCK}]==]")
  endif()
  string(CONFIGURE [===[# rp_gtest(@name@): its CTest tests (cmake/RpTesting.cmake)
if(EXISTS [==[@suites_file@]==])
  include([==[@suites_file@]==])
  foreach(entry IN LISTS rp_gtest_suites)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 test)
    list(GET parts 1 filter)
    list(GET parts 2 cases)
    list(GET parts 3 long)
    math(EXPR timeout "@rp_timeout@ * ${cases}")
    if(timeout GREATER @rp_longest@)
      set(timeout @rp_longest@)
    endif()
    set(label @rp_label@)
    if(long)
      set(label long)
    endif()
    add_test("@rp_label@.${test}" [==[@rp_executable@]==] "--gtest_filter=${filter}")
    set_tests_properties("@rp_label@.${test}" PROPERTIES LABELS ${label} TIMEOUT ${timeout} @rp_properties@)
  endforeach()
else()
  add_test(@name@_NOT_BUILT @name@_NOT_BUILT)
endif()
]===] rp_include @ONLY)
  file(GENERATE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake" CONTENT "${rp_include}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake")
endmacro()

# mpiexec as CTest runs it: as root Open MPI needs --allow-run-as-root, and more ranks than cores
# need --oversubscribe. Ranks get one compute thread each (RP_NUM_THREADS=1) so they do not fight.
set(RP_MPIEXEC_FLAGS ${MPIEXEC_PREFLAGS} --oversubscribe --bind-to none)
execute_process(COMMAND id -u OUTPUT_VARIABLE _rp_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_rp_uid STREQUAL "0")
  list(APPEND RP_MPIEXEC_FLAGS --allow-run-as-root)
endif()

# rp_mpi_test(<name> SOURCES ... LIBS ... RANKS 2 4 [LONG_RANKS 3] [FILTER pattern] [TORCH] [TIMEOUT s])
# One gtest binary with the MPI-aware main (tests/mpi/mpi_gtest_main.cpp), run once per rank count; LONG_RANKS
# only in `scripts/test.sh --all` (label long). A gtest skip reads as a CTest skip, not a pass; a FILTER that
# matches no case fails (the main checks).
function(rp_mpi_test name)
  cmake_parse_arguments(arg "TORCH" "TIMEOUT;FILTER" "SOURCES;LIBS;RANKS;LONG_RANKS" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 180)
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LIBS} rp_mpi_gtest_main rp_warnings)
  if(arg_TORCH AND RP_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM rp_model)
  endif()
  set(filter)
  if(arg_FILTER)
    set(filter --gtest_filter=${arg_FILTER})
  endif()
  foreach(ranks IN LISTS arg_RANKS arg_LONG_RANKS)
    set(labels mpi)
    if(ranks IN_LIST arg_LONG_RANKS)
      set(labels "mpi;long")
    endif()
    add_test(NAME mpi.${name}.np${ranks}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${RP_MPIEXEC_FLAGS}
                     $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS} ${filter})
    set_tests_properties(mpi.${name}.np${ranks} PROPERTIES LABELS "${labels}" TIMEOUT ${arg_TIMEOUT}
                         ENVIRONMENT "RP_NUM_THREADS=1" RESOURCE_LOCK cores
                         SKIP_RETURN_CODE 77)
  endforeach()
endfunction()
