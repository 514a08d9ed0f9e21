# Runs the consumer test in script mode (cmake -P): install the flashattn build BUILD_DIR into
# WORK_DIR/stage, configure and build the project SOURCE_DIR in WORK_DIR/build against that prefix
# only, and run it. Each step must succeed; the first failure ends the test with its output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT ${var})
    message(FATAL_ERROR "consumer: -D${var}=... is required")
  endif()
endforeach()

set(stage "${WORK_DIR}/stage")
set(bin "${WORK_DIR}/build")
# Start from nothing: a cache or staged files left by an earlier run must not hide a broken package.
file(REMOVE_RECURSE "${WORK_DIR}")

# Runs one step, echoing the command; stops the test if it fails.
function(step name)
  message(STATUS "consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO STDOUT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${name} failed (${rc})")
  endif()
endfunction()

set(install_args --install "${BUILD_DIR}" --prefix "${stage}")
if(BUILD_TYPE)
  list(APPEND install_args --config "${BUILD_TYPE}")
endif()
step("install into ${stage}" "${CMAKE_COMMAND}" ${install_args})

set(configure_args
  -S "${SOURCE_DIR}" -B "${bin}" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_PREFIX_PATH=${stage}"
  # Only the staged prefix may provide flashattn: no package registries, no other prefixes.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
  "-DFLASHATTN_EXPECT_PREFIX=${stage}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_LAUNCHER)
  string(REPLACE "|" ";" launcher "${CXX_LAUNCHER}")
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${launcher}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(SANITIZE)  # the static libraries were compiled with sanitizers: link the consumer with them too
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
if(CUDA_ROOT)
  list(APPEND configure_args "-DCUDAToolkit_ROOT=${CUDA_ROOT}")
endif()
if(EXPECT_VERSION)
  list(APPEND configure_args "-DFLASHATTN_EXPECT_VERSION=${EXPECT_VERSION}")
endif()
if(EXPECT_CPU)
  list(APPEND configure_args "-DFLASHATTN_EXPECT_CPU=${EXPECT_CPU}")
endif()
if(EXPECT_PROPS)
  list(APPEND configure_args "-DFLASHATTN_EXPECT_PROPS=${EXPECT_PROPS}")
endif()
step("configure" "${CMAKE_COMMAND}" ${configure_args})
step("build" "${CMAKE_COMMAND}" --build "${bin}" --parallel 2)
step("run" "${bin}/flashattn_consumer")

# The installed property suite on the consumer's own implementations: the naive one must pass the
# cross-check properties, the planted top-left one must be reported as failing.
if(EXPECT_PROPS)
  set(props_filter "--test-case=forward agrees with the fp64 oracle,repeated calls are bitwise identical")
  step("props: naive passes" "${CMAKE_COMMAND}" -E env FLASHATTN_PROPS_IMPL=naive FLASHATTN_PROPS_CASES=60
       "${bin}/flashattn_consumer_props" "${props_filter}")
  message(STATUS "consumer: props: naive_top_left must fail")
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env FLASHATTN_PROPS_IMPL=naive_top_left FLASHATTN_PROPS_CASES=60
                          "${bin}/flashattn_consumer_props" "--test-case=forward agrees with the fp64 oracle"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(APPEND out "${err}")
  if(rc EQUAL 0 OR NOT out MATCHES "naive_top_left")
    message(FATAL_ERROR "consumer: the broken implementation was not reported as failing (rc ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "[^\n]*naive_top_left[^\n]*" first "${out}")
  message(STATUS "consumer: props: naive_top_left fails as it must: ${first}")
endif()
