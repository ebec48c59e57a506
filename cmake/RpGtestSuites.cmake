# Run after an rp_gtest binary links (cmake -P): lists its cases and writes SUITES_FILE, the test suites CTest
# runs, one process each (Note [One process per suite] in cmake/RpTesting.cmake): the list rp_gtest_suites of
# "<suite>|<gtest filter>|<cases>".
# Inputs: TEST_EXECUTABLE, SUITES_FILE, DISCOVERY_TIMEOUT.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests TIMEOUT ${DISCOVERY_TIMEOUT}
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  file(REMOVE "${SUITES_FILE}")
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${result}):\n${listing}${errors}")
endif()

# --gtest_list_tests: "Suite." lines (parameterised: "Prefix/Suite.", typed: "Suite/0.  # TypeParam = ..."),
# each followed by its cases indented ("  Case", "  Case/0  # GetParam() = ...").
string(REPLACE "\n" ";" lines "${listing}")
set(content "# Written by cmake/RpGtestSuites.cmake from ${TEST_EXECUTABLE} --gtest_list_tests.\nset(rp_gtest_suites\n")
set(suite "")
set(cases 0)
foreach(line IN LISTS lines ITEMS ".")  # "." ends the last suite
  string(REGEX REPLACE " *#.*$" "" line "${line}")
  if(line MATCHES "^([^ ]*)\\.$")
    if(cases GREATER 0)
      string(APPEND content "  \"${suite}|${suite}.*|${cases}\"\n")
    endif()
    set(suite "${CMAKE_MATCH_1}")
    set(cases 0)
  elseif(line MATCHES "^  +[^ ]+$" AND suite)
    math(EXPR cases "${cases} + 1")
  endif()
endforeach()
string(APPEND content ")\n")
file(WRITE "${SUITES_FILE}" "${content}")
