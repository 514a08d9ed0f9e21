# flashattn_unit: doctest unit tests of the public API (validation, conversions, the mask definition,
# merge, problem geometry). Each test case is registered with ctest on its own.
find_package(doctest CONFIG REQUIRED)
include(doctest)

add_executable(flashattn_unit
  ${CMAKE_CURRENT_LIST_DIR}/unit/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/convert.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/mask.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/quantized.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/quantized_append.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/merge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/problem.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/reference_rounding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/validate_forward.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/validate_backward.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/validate_varlen.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/validate_accepts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/validate_inference.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/bias_dropout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/block_mask.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/api.cpp)
target_link_libraries(flashattn_unit PRIVATE flashattn::reference doctest::doctest)
target_compile_options(flashattn_unit PRIVATE -Wall -Wextra)
# Bad arguments must also be rejected, writing nothing, by the CPU backend's entry points.
if(TARGET flashattn::cpu)
  target_link_libraries(flashattn_unit PRIVATE flashattn::cpu)
  target_compile_definitions(flashattn_unit PRIVATE FLASHATTN_UNIT_HAS_CPU)
  # The CPU's bias, dropout and dbias, judged against the oracle by the tolerance rule.
  if(TARGET flashattn_tolerance)
    target_sources(flashattn_unit PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cpu/unit_bias_dropout.cpp)
    target_link_libraries(flashattn_unit PRIVATE flashattn_tolerance)
  endif()
endif()
doctest_discover_tests(flashattn_unit TEST_PREFIX "unit/")
