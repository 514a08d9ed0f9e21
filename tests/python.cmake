# The Python package's tests (python/tests, pytest), registered when FLASHATTN_PYTHON_TESTS names a
# Python interpreter into which the package and its test dependencies are installed (scripts/test
# does that with scripts/python-env; they test the installed package, not the source tree).
if(FLASHATTN_PYTHON_TESTS)
  foreach(part bindings testing torch_op sdpa docs)
    add_test(NAME python_${part}
             COMMAND ${FLASHATTN_PYTHON_TESTS} -m pytest -q -p no:cacheprovider
                     ${PROJECT_SOURCE_DIR}/python/tests/test_${part}.py
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(python_${part} PROPERTIES TIMEOUT 1200 LABELS python)
  endforeach()
endif()
