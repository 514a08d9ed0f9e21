// The doctest entry point of flashattn_reliability: every tests/reliability/*.cpp file adds its
// test cases here.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
