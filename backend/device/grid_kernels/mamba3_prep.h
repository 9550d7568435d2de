// The Mamba-3 layer's per-token arithmetic around its core (the Ops<T>
// entry points Mamba3Gates*, Mamba3Angles*, Mamba3Rotary*,
// Mamba3Coefficients*, Mamba3GateOutput*: contracts in ops.h) as grid
// functors. Each functor writes disjoint elements per index; every sum runs
// inside one index in a fixed order (no atomics), in the order of the CPU
// kernels (backend/kernels/mamba3_prep.cc). The angle scan is a grid over
// (sequence, head, angle) that walks the tokens in order.
//
// Not the core (mamba3_core.h in this folder), not the projections.
//
//   exec.ForEach(S * H, grid::Mamba3GatesFn<float>{dt, lam, dt_bias, H});
//
// Dimensions (mamba3_layer.h): S rows = B sequences of Ts tokens, H heads,
// Dv SSM head dim, Dk state dim, Na rotary angles.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"
#include "backend/device/precision.h"

namespace stateflow::backend::grid {

template <typename T>
SF_HD inline T Pi() {
  return static_cast<ComputeOf<T>>(3.14159265358979323846);
}

// f(u) = 1 + u (u >= 0), 1 / (1 - u) (u < 0); its derivative; A = -max(f,
// floor).
template <typename T>
SF_HD inline T HeavyTail(T u) {
  return u >= ComputeOf<T>(0) ? ComputeOf<T>(1) + u : ComputeOf<T>(1) / (ComputeOf<T>(1) - u);
}
template <typename T>
SF_HD inline T HeavyTailGrad(T u) {
  return u >= ComputeOf<T>(0) ? ComputeOf<T>(1) : ComputeOf<T>(1) / ((ComputeOf<T>(1) - u) * (ComputeOf<T>(1) - u));
}
template <typename T>
SF_HD inline T DecayRate(T u, T floor) {
  return -Max(HeavyTail(u), floor);
}

// (t, h): dt = softplus(dt + dt_bias_h), lam = sigmoid(lam), in place.
template <typename T>
struct Mamba3GatesFn {
  T* dt;             // (S, H)
  T* lam;            // (S, H)
  const T* dt_bias;  // (H)
  int64_t H;
  SF_HD void operator()(int64_t i) const {
    dt[i] = Softplus(dt[i] + dt_bias[i % H]);
    lam[i] = Sigmoid(lam[i]);
  }
};

// (t, j): theta = pi tanh(theta), in place.
template <typename T>
struct Mamba3ThetaFn {
  T* theta;  // (S, Na)
  SF_HD void operator()(int64_t i) const { theta[i] = Pi<ComputeOf<T>>() * Tanh(theta[i]); }
};

// (t, h): ddA, dtrap written; ddt scaled by softplus' derivative.
template <typename T>
struct Mamba3GatesGradFn {
  T* ddA;
  T* dtrap;
  T* ddt;                              // (S, H) in place
  const T *da, *dgamma, *dbeta;        // (S, H)
  const T *A_proj, *dt, *lam;          // (S, H)
  ComputeOf<T> a_floor;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> d = dt[i], l = lam[i], u = A_proj[i];
    const bool floored = HeavyTail(u) <= a_floor;
    ddA[i] = floored ? ComputeOf<T>(0) : -da[i] * d * HeavyTailGrad(u);
    dtrap[i] = (dgamma[i] - dbeta[i]) * d * l * (ComputeOf<T>(1) - l);
    ddt[i] *= -Expm1(-d);
  }
};

// h: ddt_bias_h += ddt[t, h] over the rows in order.
template <typename T>
struct Mamba3DtBiasGradFn {
  GradOf<T>* ddt_bias;    // (H)
  const T* ddt;   // (S, H)
  int64_t S, H;
  SF_HD void operator()(int64_t h) const {
    for (int64_t t = 0; t < S; ++t) ddt_bias[h] += ddt[t * H + h];
  }
};

// (b, h, j): phi_t = (phi_{t-1} + theta_t dt_t) mod 2 pi over sequence b's
// tokens in order, from angle_in; the last into angle_out unless nullptr.
template <typename T>
struct Mamba3AnglesFn {
  StatOf<T>* phi;               // (B Ts, H, Na)
  StatOf<T>* angle_out;         // (B, H, Na) or nullptr
  const T* theta;       // (B Ts, Na)
  const T* dt;          // (B Ts, H)
  const StatOf<T>* angle_in;    // (B, H, Na)
  int64_t Ts, H, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = H * Na, b = i / n, e = i % n, h = e / Na, j = e % Na;
    const ComputeOf<T> two_pi = static_cast<ComputeOf<T>>(2 * 3.14159265358979323846);
    ComputeOf<T> p = angle_in[i];
    for (int64_t t = b * Ts; t < (b + 1) * Ts; ++t) {
      p += theta[t * Na + j] * dt[t * H + h];
      p -= two_pi * Floor(p / two_pi);
      phi[t * n + e] = p;
    }
    if (angle_out != nullptr) angle_out[i] = p;
  }
};

// (b, h, j): the reverse scan: dphi_t becomes acc_t = d(angle out) + sum of
// dphi_u, u >= t, in place; dangle_in = acc at the sequence's first token.
template <typename T>
struct Mamba3AnglesScanGradFn {
  StatOf<T>* dphi;               // (B Ts, H, Na) in place
  StatOf<T>* dangle_in;          // (B, H, Na) or nullptr
  const StatOf<T>* dangle_out;   // (B, H, Na) or nullptr
  int64_t Ts, H, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = H * Na, b = i / n, e = i % n;
    ComputeOf<T> acc = dangle_out != nullptr ? dangle_out[i] : ComputeOf<T>(0);
    for (int64_t t = (b + 1) * Ts - 1; t >= b * Ts; --t) {
      acc += dphi[t * n + e];
      dphi[t * n + e] = acc;
    }
    if (dangle_in != nullptr) dangle_in[i] = acc;
  }
};

// (t, j): dtheta = (sum_h acc_thj dt_th) (pi - theta^2 / pi).
template <typename T>
struct Mamba3ThetaGradFn {
  T* dtheta;         // (B Ts, Na)
  const StatOf<T>* acc;  // (B Ts, H, Na)
  const T* theta;    // (B Ts, Na)
  const T* dt;       // (B Ts, H)
  int64_t H, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / Na, j = i % Na;
    ComputeOf<T> sum = 0;
    for (int64_t h = 0; h < H; ++h) sum += acc[(t * H + h) * Na + j] * dt[t * H + h];
    const ComputeOf<T> th = theta[i];
    dtheta[i] = sum * (Pi<ComputeOf<T>>() - th * th / Pi<ComputeOf<T>>());
  }
};

// (t, h): ddt += sum_j acc_thj theta_tj.
template <typename T>
struct Mamba3AngleDtGradFn {
  T* ddt;            // (B Ts, H)
  const StatOf<T>* acc;  // (B Ts, H, Na)
  const T* theta;    // (B Ts, Na)
  int64_t H, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / H;
    ComputeOf<T> sum = 0;
    for (int64_t j = 0; j < Na; ++j) sum += acc[i * Na + j] * theta[t * Na + j];
    ddt[i] += sum;
  }
};

// (t, h, c): out = rot(in_t + bias_h, phi_th) at channel c (its pair's
// partner read too).
template <typename T>
struct Mamba3RotateFn {
  T* out;          // (S, H, Dk)
  const T* in;     // (S, Dk)
  const T* bias;   // (H, Dk)
  const StatOf<T>* phi;    // (S, H, Na)
  int64_t H, Dk, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t c = i % Dk, r = i / Dk, h = r % H, t = r / H;
    const ComputeOf<T> u = in[t * Dk + c] + bias[h * Dk + c];
    if (c >= 2 * Na) {
      out[i] = u;
      return;
    }
    const int64_t j = c / 2, c0 = 2 * j;
    const ComputeOf<T> ph = phi[r * Na + j], cs = Cos(ph), sn = Sin(ph);
    const ComputeOf<T> u0 = c == c0 ? u : in[t * Dk + c0] + bias[h * Dk + c0];
    const ComputeOf<T> u1 = c == c0 ? in[t * Dk + c0 + 1] + bias[h * Dk + c0 + 1] : u;
    out[i] = c == c0 ? cs * u0 - sn * u1 : sn * u0 + cs * u1;
  }
};

// (t, h, j < Na): dphi from dk and dq (k's share first), then the pair j of
// dk and dq turned back by -phi, in place.
template <typename T>
struct Mamba3RotaryPairGradFn {
  StatOf<T>* dphi;          // (S, H, Na)
  T* dq;            // (S, H, Dk) in place
  T* dk;            // (S, H, Dk) in place
  const T* q;       // (S, H, Dk) rotated
  const T* k;       // (S, H, Dk) rotated
  const StatOf<T>* phi;     // (S, H, Na)
  int64_t Dk, Na;
  SF_HD void operator()(int64_t i) const {
    const int64_t r = i / Na, j = i % Na, c0 = r * Dk + 2 * j;
    const ComputeOf<T> cs = Cos(phi[i]), sn = Sin(phi[i]);
    ComputeOf<T> acc = 0;
    T* grads[2] = {dk, dq};
    const T* xs[2] = {k, q};
    for (int u = 0; u < 2; ++u) {
      T* g = grads[u] + c0;
      const T* x = xs[u] + c0;
      const ComputeOf<T> g0 = g[0], g1 = g[1];
      acc += g1 * x[0] - g0 * x[1];
      g[0] = cs * g0 + sn * g1;
      g[1] = -sn * g0 + cs * g1;
    }
    dphi[i] = acc;
  }
};

// (t, c): dn = sum_h du_thc (du: the unrotated gradient).
template <typename T>
struct Mamba3HeadSumFn {
  T* dn;          // (S, Dk)
  const T* du;    // (S, H, Dk)
  int64_t H, Dk;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / Dk, c = i % Dk;
    ComputeOf<T> acc = 0;
    for (int64_t h = 0; h < H; ++h) acc += du[(t * H + h) * Dk + c];
    dn[i] = acc;
  }
};

// (h, c): dbias_hc += du_thc over the rows in order.
template <typename T>
struct Mamba3BiasGradFn {
  GradOf<T>* dbias;  // (H, Dk)
  const T* du;    // (S, H, Dk)
  int64_t S, H, Dk;
  SF_HD void operator()(int64_t i) const {
    for (int64_t t = 0; t < S; ++t) dbias[i] += du[t * H * Dk + i];
  }
};

// i: a = A(A_proj) dt, gamma = lam dt, beta = (1 - lam) dt.
template <typename T>
struct Mamba3CoefficientsFn {
  T *a, *gamma, *beta;
  const T *A_proj, *dt, *lam;
  ComputeOf<T> a_floor;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> d = dt[i], l = lam[i];
    a[i] = DecayRate(ComputeOf<T>(A_proj[i]), a_floor) * d;
    gamma[i] = l * d;
    beta[i] = (ComputeOf<T>(1) - l) * d;
  }
};

// i: ddt = da A + dgamma lam + dbeta (1 - lam).
template <typename T>
struct Mamba3CoefficientsGradFn {
  T* ddt;
  const T *da, *dgamma, *dbeta, *A_proj, *lam;
  ComputeOf<T> a_floor;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> A = DecayRate(ComputeOf<T>(A_proj[i]), a_floor), l = lam[i];
    ddt[i] = da[i] * A + dgamma[i] * l + dbeta[i] * (ComputeOf<T>(1) - l);
  }
};

// (t, h, p): gated = (o + D_h xv) silu_z.
template <typename T>
struct Mamba3GateOutputFn {
  T* gated;
  const T *o, *xv, *silu_z, *D;
  int64_t H, Dv;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> Dh = D[(i / Dv) % H];
    gated[i] = (o[i] + Dh * xv[i]) * silu_z[i];
  }
};

// (t, h, p): dz = dgated (o + D_h xv), d_o = dgated silu_z, dxv = D_h d_o.
template <typename T>
struct Mamba3GateOutputGradFn {
  T *dz, *d_o, *dxv;
  const T *dgated, *o, *xv, *silu_z, *D;
  int64_t H, Dv;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> Dh = D[(i / Dv) % H];
    const ComputeOf<T> u = o[i] + Dh * xv[i];
    const ComputeOf<T> du = dgated[i] * silu_z[i];
    dz[i] = dgated[i] * u;
    d_o[i] = du;
    dxv[i] = Dh * du;
  }
};

// h: dD_h += sum_p dgated silu_z xv, row by row in order.
template <typename T>
struct Mamba3SkipGradFn {
  GradOf<T>* dD;
  const T *dgated, *xv, *silu_z;
  int64_t S, H, Dv;
  SF_HD void operator()(int64_t h) const {
    for (int64_t t = 0; t < S; ++t) {
      const int64_t i = (t * H + h) * Dv;
      ComputeOf<T> sum = 0;
      for (int64_t p = 0; p < Dv; ++p) sum += dgated[i + p] * silu_z[i + p] * xv[i + p];
      dD[h] += sum;
    }
  }
};

}  // namespace stateflow::backend::grid
