# Test registration. Every CTest test carries a label (unit, mpi, golden, gpu) and a timeout.
if(NOT RP_BUILD_TESTS)
  return()
endif()
find_package(GTest REQUIRED)
include(GoogleTest)

set(RP_DEFAULT_FIXTURES_DIR "${PROJECT_SOURCE_DIR}/../shared/fixtures" CACHE PATH
    "Shared test fixtures (RP_FIXTURES_DIR in the environment overrides it)")

# rp_gtest(<name> LABEL <label> SOURCES ... LIBS ... [TORCH] [ENV k=v] [TIMEOUT s] [FIXTURES ...] [LONG pattern])
# One gtest binary whose test cases become CTest tests. TORCH reuses rp_model's precompiled header. The cases
# matching the gtest pattern LONG are labelled long instead (only in `scripts/test.sh --all`; CMake 3.25's
# discovery takes one label per test).
function(rp_gtest name)
  cmake_parse_arguments(arg "TORCH" "LABEL;TIMEOUT;LONG" "SOURCES;LIBS;ENV;FIXTURES" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LIBS} rp_test_support GTest::gtest GTest::gtest_main rp_warnings)
  set_property(GLOBAL APPEND PROPERTY RP_TIER_TARGETS_${arg_LABEL} ${name})
  if(arg_TORCH AND RP_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM rp_model)
  endif()
  # CMake 3.25's gtest_discover_tests splits list-valued properties, so at most one ENV entry.
  set(props LABELS ${arg_LABEL} TIMEOUT ${arg_TIMEOUT})
  list(LENGTH arg_ENV env_count)
  if(env_count GREATER 1)
    message(FATAL_ERROR "rp_gtest(${name}): at most one ENV entry (gtest_discover_tests limitation)")
  elseif(env_count EQUAL 1)
    list(APPEND props ENVIRONMENT ${arg_ENV})
  endif()
  if(arg_FIXTURES)
    list(APPEND props FIXTURES_REQUIRED "${arg_FIXTURES}")
  endif()
  if(arg_LONG)
    gtest_discover_tests(${name} TEST_PREFIX "${arg_LABEL}." DISCOVERY_TIMEOUT 60 TEST_FILTER "-${arg_LONG}"
                         PROPERTIES ${props})
    list(TRANSFORM props REPLACE "^${arg_LABEL}$" long)
    gtest_discover_tests(${name} TEST_PREFIX "${arg_LABEL}." DISCOVERY_TIMEOUT 60 TEST_FILTER "${arg_LONG}"
                         PROPERTIES ${props})
  else()
    gtest_discover_tests(${name} TEST_PREFIX "${arg_LABEL}." DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
  endif()
endfunction()

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
                         SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endforeach()
endfunction()
