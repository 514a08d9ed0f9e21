# The GPU property runner (only where flashattn::gpu is built). One ctest entry running the whole
# runner: without a CUDA device it exits with 77, which ctest reports as SKIPPED (not passed).
# Test discovery is not used because listing would need the runner to start without a device.
if(TARGET flashattn::gpu AND TARGET flashattn_props)
  add_executable(flashattn_props_gpu ${CMAKE_CURRENT_LIST_DIR}/gpu/props.cpp)
  target_link_libraries(flashattn_props_gpu PRIVATE flashattn_props flashattn::gpu CUDA::cudart_static)
  target_compile_options(flashattn_props_gpu PRIVATE -Wall -Wextra)
  if(TARGET flashattn::cpu)  # GPU vs CPU at sizes the oracle is slow for
    target_link_libraries(flashattn_props_gpu PRIVATE flashattn::cpu)
    target_compile_definitions(flashattn_props_gpu PRIVATE FLASHATTN_GPU_TEST_CPU)
  endif()
  add_test(NAME flashattn_props_gpu COMMAND flashattn_props_gpu)
  set_tests_properties(flashattn_props_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS "props;gpu")
endif()

# Argument checks of flashattn::gpu that need no device (runs everywhere the backend is built).
if(TARGET flashattn::gpu)
  find_package(doctest CONFIG REQUIRED)
  add_executable(flashattn_gpu_args ${CMAKE_CURRENT_LIST_DIR}/gpu/args.cpp)
  target_link_libraries(flashattn_gpu_args PRIVATE flashattn::gpu doctest::doctest)
  target_compile_options(flashattn_gpu_args PRIVATE -Wall -Wextra)
  add_test(NAME flashattn_gpu_args COMMAND flashattn_gpu_args)
  set_tests_properties(flashattn_gpu_args PROPERTIES LABELS "unit;gpu")
endif()

# The kernels' logic under the host emulator (gpu/emu/), checked against the oracle without a GPU.
# FLASHATTN_PROPS_CASES bounds its run time (emulation is slow); ctest runs a small number.
if(TARGET flashattn_gpu_emu AND TARGET flashattn_props)
  add_executable(flashattn_props_gpu_emu ${PROJECT_SOURCE_DIR}/gpu/emu/props_emu.cpp
                                         ${PROJECT_SOURCE_DIR}/gpu/emu/props_calls.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_inference.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_bias_dropout.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_block_mask.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_schedules.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_softmax.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/emu_checks.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/props_emu_sm90.cpp
                                         ${CMAKE_CURRENT_LIST_DIR}/gpu/sm90_emu.cpp)
  target_link_libraries(flashattn_props_gpu_emu PRIVATE flashattn_props flashattn_gpu_emu)
  # The checks' own tests compile small kernels as the emulator does.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gpu/emu_checks.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu/sm90_emu.cpp PROPERTIES
                              COMPILE_DEFINITIONS FLASHATTN_GPU_EMULATE INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
  target_compile_options(flashattn_props_gpu_emu PRIVATE -Wall -Wextra)
  # Three entries, so that ctest -j runs them side by side: the shared properties (every registered
  # implementation: the cross-checks, repeatability, containment), the emulator's own cases
  # ("gpu-emulated …": inference, bias/dropout, schedules, tile edges, multi-tile pipelines) and the
  # block-sparse cases (gpu/props_emu_block_mask.cpp, fixed cases). A mutant's kill regex names the
  # first two together, ^flashattn_props_gpu_emu(_cases)?$, or only the second where the full
  # mutation run saw only it kill the mutant: the first then ran to its end (~200 s) for nothing.
  add_test(NAME flashattn_props_gpu_emu COMMAND flashattn_props_gpu_emu "--test-case-exclude=gpu-emulated*,sm90*")
  set_tests_properties(flashattn_props_gpu_emu PROPERTIES LABELS "props;gpu;emu" ENVIRONMENT "FLASHATTN_PROPS_CASES=25;FLASHATTN_EMU_SCHEDULES=3")
  add_test(NAME flashattn_props_gpu_emu_cases COMMAND flashattn_props_gpu_emu "--test-case=gpu-emulated*"
           "--test-case-exclude=gpu-emulated block-sparse:*")
  set_tests_properties(flashattn_props_gpu_emu_cases PROPERTIES LABELS "props;gpu;emu" ENVIRONMENT "FLASHATTN_PROPS_CASES=25;FLASHATTN_EMU_SCHEDULES=3")
  add_test(NAME flashattn_props_gpu_emu_block_mask COMMAND flashattn_props_gpu_emu "--test-case=gpu-emulated block-sparse:*")
  set_tests_properties(flashattn_props_gpu_emu_block_mask PROPERTIES LABELS "props;gpu;emu" ENVIRONMENT "FLASHATTN_EMU_SCHEDULES=2")
  # The sm_90a primitives (gpu/sm90.cuh) under the emulator's model of the async proxy: a TMA +
  # mbarrier + wgmma pipeline against a host product, and each hazard class planted.
  add_test(NAME flashattn_gpu_sm90_emu COMMAND flashattn_props_gpu_emu "--test-case=sm90*")
  set_tests_properties(flashattn_gpu_sm90_emu PROPERTIES LABELS "unit;gpu;emu")
  # The oracle properties again with the emulator rounding as the hardware may (FLASHATTN_EMU_NUMERICS=
  # hardware: mma.sync sums truncated toward zero, ex2.approx up to 2 ulp off; docs/gpu.md,
  # "Numerics"): the tolerance must hold there too, not only for correctly rounded arithmetic.
  add_test(NAME flashattn_props_gpu_emu_hw_numerics COMMAND flashattn_props_gpu_emu
           "--test-case=forward agrees*,backward agrees*,forward with bias*,backward with bias*,forward with a block-sparse*,backward with a block-sparse*")
  set_tests_properties(flashattn_props_gpu_emu_hw_numerics PROPERTIES LABELS "props;gpu;emu"
                       ENVIRONMENT "FLASHATTN_PROPS_CASES=50;FLASHATTN_EMU_NUMERICS=hardware")
endif()

# Static gates (scripts/gpu-budgets): registers, stack/spills, shared memory and the main loop's
# SASS counts of every kernel in the built library against gpu/budgets.tsv. Needs no GPU; installs
# cuobjdump/nvdisasm into a venv outside the clone when the toolkit has none.
if(TARGET flashattn::gpu AND TARGET flashattn_gpu_traits)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  add_test(NAME flashattn_gpu_budgets
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gpu-budgets
                   --library $<TARGET_FILE:flashattn_gpu> --traits $<TARGET_FILE:flashattn_gpu_traits>)
  set_tests_properties(flashattn_gpu_budgets PROPERTIES LABELS "gpu;static" TIMEOUT 600)
endif()

# gpu/sm90_wgmma.inc is what gpu/tools/gen_wgmma.py writes (the wgmma asm statements are generated).
if(TARGET flashattn::gpu)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  add_test(NAME flashattn_gpu_wgmma_generated
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/gpu/tools/gen_wgmma.py --check)
  set_tests_properties(flashattn_gpu_wgmma_generated PROPERTIES LABELS "gpu;static")
endif()

# The performance model (scripts/gpu-model): docs/gpu.md holds the tables it generates from
# gpu/budgets.tsv, and it joins a measured benchmark table (the H200 run) without error.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME flashattn_gpu_model
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gpu-model --check-doc ${PROJECT_SOURCE_DIR}/docs/gpu.md)
  add_test(NAME flashattn_gpu_model_join
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gpu-model
                   --join ${PROJECT_SOURCE_DIR}/benchmarks/results/2026-11-26/h100-quick-16870d0/bench.md)
  # FlashAttention-2's forward, profiled beside this library's kernels in every GPU run, is the
  # latency term's fixture: its measured cycles must stay within 15 % of the term.
  file(GLOB ncu_reports ${PROJECT_SOURCE_DIR}/benchmarks/results/*/*/ncu.txt)
  add_test(NAME flashattn_gpu_model_calibration
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gpu-model --calibrate ${ncu_reports})
  set_tests_properties(flashattn_gpu_model flashattn_gpu_model_join flashattn_gpu_model_calibration
                       PROPERTIES LABELS "gpu;static")
endif()
