// The libFuzzer executable's own translation unit: libFuzzer supplies main() and calls
// LLVMFuzzerTestOneInput, defined in the harness library (fuzz_target.cpp). Referencing the entry
// point here makes the linker pull that object out of the static library.
#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

[[maybe_unused]] static int (*const kEntry)(const uint8_t*, size_t) = LLVMFuzzerTestOneInput;
