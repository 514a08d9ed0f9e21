# The CPU property runner: flashattn::cpu registered once per (compiled Highway target this machine
# supports) x (default tiles, tiny tiles), so the oracle cross-check runs on every SIMD path, plus
# the CPU's own properties (thread-count determinism, workspace bounds, edge cases, config errors).
if(TARGET flashattn::cpu AND TARGET flashattn_props AND COMMAND flashattn_props_runner)
  flashattn_props_runner(flashattn_props_cpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/props_cpu.cpp
            ${CMAKE_CURRENT_LIST_DIR}/props_cpu_determinism.cpp
            ${CMAKE_CURRENT_LIST_DIR}/props_cpu_edges.cpp
    LIBRARIES flashattn::cpu
    LABELS cpu)
endif()
