# consumer: proves the library links the way users link it. The test installs this build into a
# staging prefix inside the build tree, configures and builds tests/consumer against it with
# find_package(flashattn CONFIG REQUIRED), and runs the consumer (see tests/consumer/run.cmake).
# The compiler, generator, launcher (ccache), build type and sanitizers of this build are passed on.
string(REPLACE ";" "|" _flashattn_launcher "${CMAKE_CXX_COMPILER_LAUNCHER}")
set(_flashattn_cuda_root "")
if(FLASHATTN_HAS_GPU AND CUDAToolkit_BIN_DIR)
  get_filename_component(_flashattn_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
add_test(NAME consumer
  COMMAND ${CMAKE_COMMAND}
    "-DBUILD_DIR=${flashattn_BINARY_DIR}"
    "-DSOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}/consumer"
    "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumer"
    "-DGENERATOR=${CMAKE_GENERATOR}"
    "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
    "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
    "-DCXX_LAUNCHER=${_flashattn_launcher}"
    "-DBUILD_TYPE=$<CONFIG>"
    "-DSANITIZE=${FLASHATTN_SANITIZE}"
    "-DCUDA_ROOT=${_flashattn_cuda_root}"
    "-DEXPECT_VERSION=${flashattn_VERSION}"
    "-DEXPECT_CPU=${FLASHATTN_HAS_CPU}"
    "-DEXPECT_PROPS=$<BOOL:$<TARGET_EXISTS:flashattn_props>>"
    -P ${CMAKE_CURRENT_LIST_DIR}/consumer/run.cmake)
# Configuring and compiling a project takes a while on a loaded 2-core machine.
set_tests_properties(consumer PROPERTIES TIMEOUT 900 LABELS "consumer")
