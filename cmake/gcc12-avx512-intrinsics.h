// Forced first include (-include) of native builds with GCC before 12.3:
// GCC 12.1/12.2's own AVX-512 intrinsics headers warn "'__Y' may be used
// uninitialized" wherever Eigen's vectorised code inlines them (GCC bug
// 105593; Debian 12 ships 12.2), about 1,400 times in a clean build.
// Including <immintrin.h> here, first, between these pragmas silences only
// warnings located in those headers; our own -Wmaybe-uninitialized warnings
// are kept.
//
// Not for anything else: CMakeLists.txt adds it only when SF_NATIVE is on and
// the compiler is GCC older than 12.3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
