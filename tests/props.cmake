# Property runners: one executable per set of implementations, each TEST_CASE (property) its own
# ctest entry, labelled "props". FLASHATTN_PROPS_CASES=N in the environment raises the cases per
# property; RC_PARAMS works as usual.
find_package(doctest CONFIG REQUIRED)
include(doctest)

# flashattn_props_runner(<target> SOURCES <runner.cpp>... [LIBRARIES <lib>...] [LABELS <label>...])
# builds a runner from its sources (which call props::add and props::run) plus the cross-check
# properties, and registers each of its test cases with ctest.
function(flashattn_props_runner target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE flashattn_props ${ARG_LIBRARIES})
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  doctest_discover_tests(${target} TEST_PREFIX "${target}: " TEST_LIST ${target}_TESTS)
  # doctest 2.4.9's generated script always ends with its own (empty) LABELS, so labels set through
  # PROPERTIES are lost: set them from a ctest include file that runs after doctest's.
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
  file(WRITE ${labels_file}
       "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"props;${ARG_LABELS}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()

# The oracle in both precisions, plus the properties of the oracle itself.
flashattn_props_runner(flashattn_props_reference
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/reference/props.cpp
  LIBRARIES flashattn_props_oracle)
