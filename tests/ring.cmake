# Ring attention under MPI: the same test program with 1, 2, 3 and 4 ranks (oversubscribed on small
# machines; one OpenMP thread per rank). OpenMPI refuses to run as root without the two variables,
# and its shared-memory single-copy path (CMA) is not allowed in containers. Under ASan, leak
# checking is off for these tests only: it reports OpenMPI's own allocations.
if(FLASHATTN_HAS_RING)
  add_executable(flashattn_ring_tests ring/tests.cpp)
  target_link_libraries(flashattn_ring_tests PRIVATE flashattn::ring flashattn_tolerance)
  if(TARGET flashattn_gpu_emu)  # the GPU kernels as block backend, under the host emulator
    target_link_libraries(flashattn_ring_tests PRIVATE flashattn_gpu_emu)
    target_compile_definitions(flashattn_ring_tests PRIVATE FLASHATTN_RING_TEST_GPU_EMU)
  endif()
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE flashattn_mpiexec_version ERROR_QUIET)
  set(flashattn_mpiexec_flags "")
  if(flashattn_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(flashattn_mpiexec_flags --oversubscribe)
  endif()
  foreach(ranks 1 2 3 4)
    add_test(NAME ring_np${ranks}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${flashattn_mpiexec_flags}
                     $<TARGET_FILE:flashattn_ring_tests>)
    set_tests_properties(ring_np${ranks} PROPERTIES TIMEOUT 600 ENVIRONMENT
      "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0:abort_on_error=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endif()
