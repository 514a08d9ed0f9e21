# flashattn_tolerance: the tolerance rule (compare.cpp) and its application to one call
# (tolerance.cpp). No RapidCheck or doctest, so the property suite, the reliability tests, the fuzz
# target and the benchmarks all link this one implementation of the rule.
add_library(flashattn_tolerance STATIC ${CMAKE_CURRENT_LIST_DIR}/compare.cpp ${CMAKE_CURRENT_LIST_DIR}/tolerance.cpp)
target_include_directories(flashattn_tolerance PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(flashattn_tolerance PUBLIC flashattn::reference)
target_compile_options(flashattn_tolerance PRIVATE -Wall -Wextra)
