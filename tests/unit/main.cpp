// The doctest entry point of flashattn_unit: every tests/unit/*.cpp file adds its test cases here.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
