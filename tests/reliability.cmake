# Reliability: the fuzz harness and its corpus replay, odd and extreme sizes, numerical
# extremes, concurrency, and the opt-in > 2^31-element test. The CPU variants are compiled in when
# flashattn::cpu exists. scripts/sanitize builds this under ASan+UBSan, TSan and libFuzzer.
find_package(doctest CONFIG REQUIRED)
include(doctest)

option(FLASHATTN_BUILD_FUZZER "Build the libFuzzer target flashattn_fuzz (clang; add fuzzer-no-link to FLASHATTN_SANITIZE)" OFF)

set(_rel_dir ${CMAKE_CURRENT_LIST_DIR})
set(_rel_libs flashattn::reference flashattn_tolerance)
set(_rel_defs "")
if(TARGET flashattn::cpu)
  list(APPEND _rel_libs flashattn::cpu)
  list(APPEND _rel_defs FLASHATTN_FUZZ_CPU FLASHATTN_RELIABILITY_CPU)
endif()

# The fuzz harness (decoder + checks) without a main: linked into the replay runner and the fuzzer.
add_library(flashattn_fuzz_harness STATIC ${_rel_dir}/fuzz/fuzz_case.cpp ${_rel_dir}/fuzz/fuzz_target.cpp)
target_link_libraries(flashattn_fuzz_harness PUBLIC ${_rel_libs})
target_compile_definitions(flashattn_fuzz_harness PRIVATE ${_rel_defs})
target_compile_options(flashattn_fuzz_harness PRIVATE -Wall -Wextra)

# Replays the seed corpus (and any crash reproducer given on the command line) with any compiler.
add_executable(flashattn_fuzz_replay ${_rel_dir}/fuzz/replay_main.cpp)
target_link_libraries(flashattn_fuzz_replay PRIVATE flashattn_fuzz_harness)
add_test(NAME "reliability: fuzz corpus replay" COMMAND flashattn_fuzz_replay ${_rel_dir}/fuzz/corpus)
# Inputs that once crashed the harness (one file per bug, named after it): they must stay fixed.
# Undefined behaviour in them only shows under UBSan (scripts/sanitize).
add_test(NAME "reliability: fuzz regressions replay" COMMAND flashattn_fuzz_replay ${_rel_dir}/fuzz/regressions)

if(FLASHATTN_BUILD_FUZZER)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FLASHATTN_BUILD_FUZZER needs clang (libFuzzer); configure with CXX=clang++-14")
  endif()
  add_executable(flashattn_fuzz ${_rel_dir}/fuzz/fuzz_main.cpp)
  target_link_libraries(flashattn_fuzz PRIVATE flashattn_fuzz_harness)
  target_link_options(flashattn_fuzz PRIVATE -fsanitize=fuzzer)
  # Comparison tracing (trace-cmp, part of fuzzer-no-link's coverage) guides the search where the
  # inputs are decided: the argument validation (flashattn::core) and the harness. In the compute
  # libraries, whose loops compare indices millions of times per case, its callbacks took half of a
  # full-mode execution; they keep edge coverage, ASan and UBSan.
  foreach(_t flashattn_reference flashattn_tolerance flashattn_cpu)
    if(TARGET ${_t})
      target_compile_options(${_t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-coverage=trace-cmp>)
    endif()
  endforeach()
endif()

# doctest reliability tests; each test case is its own ctest entry.
add_executable(flashattn_reliability
  ${_rel_dir}/reliability/main.cpp
  ${_rel_dir}/reliability/support.cpp
  ${_rel_dir}/reliability/sizes.cpp
  ${_rel_dir}/reliability/extremes.cpp
  ${_rel_dir}/reliability/concurrency.cpp)
target_link_libraries(flashattn_reliability PRIVATE ${_rel_libs} doctest::doctest)
target_compile_definitions(flashattn_reliability PRIVATE ${_rel_defs})
target_compile_options(flashattn_reliability PRIVATE -Wall -Wextra)
doctest_discover_tests(flashattn_reliability TEST_PREFIX "reliability: ")

# More than 2^31 elements: needs > 8 GiB, so it runs only with FLASHATTN_HUGE=1 (exit 77: skipped).
if(TARGET flashattn::cpu)
  add_executable(flashattn_huge ${_rel_dir}/reliability/huge.cpp ${_rel_dir}/reliability/support.cpp)
  target_link_libraries(flashattn_huge PRIVATE ${_rel_libs})
  target_compile_definitions(flashattn_huge PRIVATE ${_rel_defs})
  target_compile_options(flashattn_huge PRIVATE -Wall -Wextra)
  add_test(NAME "reliability: huge (> 2^31 elements, FLASHATTN_HUGE=1)" COMMAND flashattn_huge)
  set_tests_properties("reliability: huge (> 2^31 elements, FLASHATTN_HUGE=1)" PROPERTIES SKIP_RETURN_CODE 77)
endif()
