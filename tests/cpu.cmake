# Both executables below use Highway directly (props_edges.cpp names the baseline target).
if(TARGET flashattn::cpu)
  find_package(hwy 1.0.3 CONFIG REQUIRED)
endif()

# The CPU property runner: flashattn::cpu registered once per (compiled Highway target this machine
# supports) x (default tiles, tiny tiles), so the oracle cross-check runs on every SIMD path, plus
# the CPU's own properties (thread-count determinism, workspace bounds, edge cases, config errors).
if(TARGET flashattn::cpu AND TARGET flashattn_props AND COMMAND flashattn_props_runner)
  flashattn_props_runner(flashattn_props_cpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu/props.cpp
            ${CMAKE_CURRENT_LIST_DIR}/cpu/props_determinism.cpp
            ${CMAKE_CURRENT_LIST_DIR}/cpu/props_edges.cpp
            ${CMAKE_CURRENT_LIST_DIR}/cpu/props_decode.cpp
            ${CMAKE_CURRENT_LIST_DIR}/cpu/props_inference.cpp
    LIBRARIES flashattn::cpu hwy::hwy
    LABELS cpu)
endif()

# flashattn_cpu_kernels: doctest unit tests of the CPU backend's internal SIMD helpers, each run on
# every compiled Highway target this machine supports (same flags as the library, so the same
# HWY_TARGETS and dispatch-table layout), and of its shared non-SIMD internals (ParallelFor, scratch
# layouts).
if(TARGET flashattn::cpu)
  add_executable(flashattn_cpu_kernels ${CMAKE_CURRENT_LIST_DIR}/unit/main.cpp ${CMAKE_CURRENT_LIST_DIR}/cpu/unit_simd.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/cpu/unit_internals.cpp)
  target_include_directories(flashattn_cpu_kernels PRIVATE ${PROJECT_SOURCE_DIR}/cpu ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(flashattn_cpu_kernels PRIVATE flashattn::cpu hwy::hwy doctest::doctest)
  target_compile_options(flashattn_cpu_kernels PRIVATE -Wall -Wextra)
  doctest_discover_tests(flashattn_cpu_kernels TEST_PREFIX "cpu-kernels/")
endif()
