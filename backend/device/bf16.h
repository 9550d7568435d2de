// bf16: bfloat16, the GPU's training storage type (issue 12), callable on
// both sides of the device seam (hd.h). 1 sign bit, 8 exponent bits (float's
// range), 7 mantissa bits: the top 16 bits of a float. Its bit layout is
// cuBLAS's CUDA_R_16BF and CUDA's __nv_bfloat16, so device buffers of bf16
// go to cuBLAS as they are.
//
// Conversion from float rounds to nearest, ties to even (as CUDA's
// __float2bfloat16_rn and PyTorch's float -> bfloat16); a NaN stays a NaN of
// the same sign (quiet), never rounding into an infinity; a finite float at
// or beyond the largest bf16 plus half its last place becomes an infinity.
// Conversion to float is exact.
//
// Not arithmetic: there are no bf16 operators. Both conversions are
// implicit, so a grid functor written over T reads a bf16 as the float it
// is and rounds once when it stores into a bf16 -- provided its locals are
// ComputeOf<T> (precision.h: float for bf16), never T, so that it computes
// and accumulates in float (GridOps<bf16>'s tests check this bit for bit
// against the float kernels: tests/backend/grid_bf16_test.cc).
//
//   bf16 h = 3.14159f;           // 3.140625: 0x4049
//   float f = h;
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/device/hd.h"

namespace stateflow::backend {

// The float with these bits, and the bits of a float, on either side.
SF_HD inline float FloatFromBits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)  // the device pass of nvcc
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

SF_HD inline std::uint32_t BitsOfFloat(float f) {
#if defined(__CUDA_ARCH__)  // the device pass of nvcc
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

struct bf16 {
  std::uint16_t bits;  // trivial: device buffers and shared arrays of bf16

  bf16() = default;
  // NOLINTNEXTLINE: implicit by design (above)
  SF_HD bf16(float f) : bits(RoundBits(f)) {}

  // NOLINTNEXTLINE: implicit by design
  SF_HD operator float() const {
    return FloatFromBits(static_cast<std::uint32_t>(bits) << 16);
  }

  // Read, compute in float, store rounded once: y[i] += x reads as float.
  SF_HD bf16& operator+=(float x) { return *this = bf16(float(*this) + x); }
  SF_HD bf16& operator-=(float x) { return *this = bf16(float(*this) - x); }
  SF_HD bf16& operator*=(float x) { return *this = bf16(float(*this) * x); }
  SF_HD bf16& operator/=(float x) { return *this = bf16(float(*this) / x); }

  SF_HD static bf16 FromBits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }

  // The bf16 bits nearest to f, ties to the even last mantissa bit.
  SF_HD static std::uint16_t RoundBits(float f) {
    const std::uint32_t u = BitsOfFloat(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, force quiet
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    }
    // Adding 0x7fff plus the kept part's last bit carries into the kept bits
    // exactly when the dropped half is above one half, or equal to it with an
    // odd kept part; a carry out of the mantissa steps the exponent, which is
    // the right rounding (up to infinity past the largest finite value).
    const std::uint32_t lsb = (u >> 16) & 1u;
    return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};

static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes (CUDA_R_16BF)");

}  // namespace stateflow::backend
