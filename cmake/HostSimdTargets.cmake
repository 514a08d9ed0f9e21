# flashattn_host_simd_targets(<flags-var> <disabled-var>): what FLASHATTN_SIMD_TARGETS=host compiles.
# The sanitizer, fuzzing and TSan builds only run tests on the machine that builds them, so they
# compile only the SIMD targets it runs, and on x86-64 not the scalar and SSSE3 fallbacks either
# (baseline x86-64-v2: SSE4.2): under clang's ASan the scalar target alone took over half of
# forward.cc's compile time. <flags-var>: the compile flags of that baseline; <disabled-var>: the
# Highway targets it would still compile that this machine cannot run, as one integer for
# HWY_DISABLED_TARGETS (0 when it runs them all).
function(flashattn_host_simd_targets flags_var disabled_var)
  if(CMAKE_CROSSCOMPILING)
    message(FATAL_ERROR "FLASHATTN_SIMD_TARGETS=host runs a program on the build machine; "
                        "it cannot be used when cross-compiling (use all)")
  endif()
  set(flags "")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(flags -march=x86-64-v2)
  endif()
  set(src ${CMAKE_BINARY_DIR}/CMakeFiles/flashattn_host_targets.cpp)
  file(WRITE ${src} [=[
#include <cstdio>
#include "hwy/targets.h"
int main() {
  const long long compiled = static_cast<long long>(HWY_TARGETS);
  const long long runs = static_cast<long long>(hwy::SupportedTargets());
  if ((runs & HWY_STATIC_TARGET) == 0) return 1;  // the baseline itself does not run here
  std::printf("%lld", compiled & ~runs);
  return 0;
}
]=])
  string(JOIN " " flags_string ${flags})
  try_run(run_result compile_result ${CMAKE_BINARY_DIR}/CMakeFiles/flashattn_host_targets ${src}
          CMAKE_FLAGS "-DCOMPILE_DEFINITIONS=${flags_string}"
          LINK_LIBRARIES hwy::hwy
          COMPILE_OUTPUT_VARIABLE compile_output RUN_OUTPUT_VARIABLE run_output)
  if(NOT compile_result OR NOT run_result EQUAL 0 OR NOT run_output MATCHES "^[0-9]+$")
    message(FATAL_ERROR "FLASHATTN_SIMD_TARGETS=host: could not detect the Highway targets this machine "
                        "runs with baseline '${flags_string}' (compiled: ${compile_result}, exit: ${run_result}, "
                        "printed: '${run_output}'); use all\n${compile_output}")
  endif()
  set(${flags_var} ${flags} PARENT_SCOPE)
  set(${disabled_var} ${run_output} PARENT_SCOPE)
endfunction()
