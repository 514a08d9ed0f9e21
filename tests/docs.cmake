# docs: every figure quoted in README.md, benchmarks/RESULTS.md and docs/*.md equals what its
# generator (benchmarks/figures/) computes from the result file it names, and the check is shown to
# fail: a one-digit edit planted in each quoted block, one at a time, must be caught.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  return()
endif()
add_test(NAME "docs: quoted figures equal their result files"
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/figures)
add_test(NAME "docs: a planted one-digit edit of a quoted figure is caught"
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/figures --planted)
set_tests_properties("docs: quoted figures equal their result files"
                     "docs: a planted one-digit edit of a quoted figure is caught" PROPERTIES LABELS "docs")
