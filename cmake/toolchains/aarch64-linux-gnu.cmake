# Cross-compiling for aarch64 Linux with Debian's cross toolchain (g++-aarch64-linux-gnu) against
# arm64 -dev packages installed through multiarch (libhwy-dev:arm64, librapidcheck-dev:arm64, ...
# in /usr/lib/aarch64-linux-gnu). ctest runs the binaries through qemu-user; the CPU qemu emulates
# is chosen with the QEMU_CPU environment variable (scripts/cross-arm). Used by scripts/cross-arm.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Search headers, libraries and package configs in the cross sysroot and the multiarch tree (the
# arm64 packages' /usr/lib/aarch64-linux-gnu under the / root), programs on the build host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")

# qemu-aarch64 (package qemu-user) runs the test binaries and doctest's test discovery. -L makes it
# load the cross toolchain's dynamic loader (/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1), and
# LD_LIBRARY_PATH makes that loader take libc, libstdc++ and libgomp from the same tree: without it
# the loader finds the multiarch libc6:arm64 (a later build of glibc 2.36, pulled in by libhwy1:arm64)
# through /etc/ld.so.cache, and that mix of loader and libc hangs in the first pthread_create. The
# multiarch libraries (libhwy) are still found in /usr/lib/aarch64-linux-gnu.
find_program(FLASHATTN_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(FLASHATTN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FLASHATTN_QEMU_AARCH64} -L /usr/aarch64-linux-gnu
      -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)
endif()
