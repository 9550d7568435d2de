#include "backend/kernels/mamba3_prep.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>
#include <vector>

#include "backend/kernels/silu.h"

namespace stateflow::backend {

namespace {
constexpr double kPi = std::numbers::pi;
constexpr double kTwoPi = 2 * std::numbers::pi;
}  // namespace

template <typename T>
T Mamba3HeavyTail(T u) {
  return u >= T(0) ? T(1) + u : T(1) / (T(1) - u);
}
template <typename T>
T Mamba3HeavyTailGrad(T u) {
  return u >= T(0) ? T(1) : T(1) / ((T(1) - u) * (T(1) - u));
}
template <typename T>
T Mamba3DecayRate(T u, double floor) {
  return -std::max(Mamba3HeavyTail(u), static_cast<T>(floor));
}

template <typename T>
void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias, int64_t S,
                        int64_t H, int64_t Na) {
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      T& d = dt[t * H + h];
      d = StableSoftplus(d + dt_bias[h]);
      T& l = lam[t * H + h];
      l = StableSigmoid(l);
    }
  }
  for (int64_t i = 0; i < S * Na; ++i) {
    theta[i] = static_cast<T>(kPi) * std::tanh(theta[i]);
  }
}

// d softplus(r)/dr = sigmoid(r) = 1 - exp(-softplus(r)); the floor cuts A's
// gradient.
template <typename T>
void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, T* ddt_bias, const T* da,
                         const T* dgamma, const T* dbeta, const T* A_proj,
                         const T* dt, const T* lam, int64_t S, int64_t H,
                         T a_floor) {
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      const T d = dt[i], l = lam[i], u = A_proj[i];
      const bool floored = Mamba3HeavyTail(u) <= a_floor;
      ddA[i] = floored ? T(0) : -da[i] * d * Mamba3HeavyTailGrad(u);
      dtrap[i] = (dgamma[i] - dbeta[i]) * d * l * (T(1) - l);
      ddt[i] *= -std::expm1(-d);
      ddt_bias[h] += ddt[i];
    }
  }
}

template <typename T>
void Mamba3AnglesForward(T* phi, T* angle_out, const T* theta, const T* dt,
                         const T* angle_in, int64_t B, int64_t Ts, int64_t H,
                         int64_t Na) {
  const int64_t n = H * Na;
  std::vector<T> acc(n);  // (H Na)
  for (int64_t b = 0; b < B; ++b) {
    std::copy(angle_in + b * n, angle_in + (b + 1) * n, acc.begin());
    for (int64_t t = b * Ts; t < (b + 1) * Ts; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const T d = dt[t * H + h];
        for (int64_t j = 0; j < Na; ++j) {
          T& p = acc[h * Na + j];
          p += theta[t * Na + j] * d;
          p -= static_cast<T>(kTwoPi) * std::floor(p / static_cast<T>(kTwoPi));
        }
      }
      std::copy(acc.begin(), acc.end(), phi + t * n);
    }
    if (angle_out != nullptr) std::copy(acc.begin(), acc.end(), angle_out + b * n);
  }
}

// phi_t = phi_{t-1} + theta_t dt_t (the mod 2 pi has derivative 1): acc =
// d(angle out) + the later dphi; theta = pi tanh(r): dr = dtheta (pi -
// theta^2 / pi).
template <typename T>
void Mamba3AnglesBackward(T* dtheta, T* ddt, T* dangle_in, const T* dphi,
                          const T* theta, const T* dt, const T* dangle_out,
                          int64_t B, int64_t Ts, int64_t H, int64_t Na) {
  const int64_t n = H * Na;
  std::fill(dtheta, dtheta + B * Ts * Na, T(0));
  std::vector<T> acc(n);  // (H Na)
  for (int64_t b = 0; b < B; ++b) {
    if (dangle_out != nullptr) {
      std::copy(dangle_out + b * n, dangle_out + (b + 1) * n, acc.begin());
    } else {
      std::fill(acc.begin(), acc.end(), T(0));
    }
    for (int64_t t = (b + 1) * Ts - 1; t >= b * Ts; --t) {
      for (int64_t e = 0; e < n; ++e) acc[e] += dphi[t * n + e];
      for (int64_t h = 0; h < H; ++h) {
        const T d = dt[t * H + h];
        T ddt_th = 0;
        for (int64_t j = 0; j < Na; ++j) {
          const T a = acc[h * Na + j];
          dtheta[t * Na + j] += a * d;
          ddt_th += a * theta[t * Na + j];
        }
        ddt[t * H + h] += ddt_th;
      }
    }
    if (dangle_in != nullptr) std::copy(acc.begin(), acc.end(), dangle_in + b * n);
  }
  for (int64_t i = 0; i < B * Ts * Na; ++i) {
    const T th = theta[i];
    dtheta[i] *= static_cast<T>(kPi) - th * th / static_cast<T>(kPi);
  }
}

template <typename T>
void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                         const T* C_bias, const T* B_bias, const T* phi,
                         int64_t S, int64_t H, int64_t Dk, int64_t Na) {
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const T* ph = phi + (t * H + h) * Na;
      for (const auto& [out, in, bias] :
           {std::tuple{k, Bn, B_bias}, std::tuple{q, Cn, C_bias}}) {
        T* o = out + (t * H + h) * Dk;
        for (int64_t c = 0; c < Dk; ++c) o[c] = in[t * Dk + c] + bias[h * Dk + c];
        for (int64_t j = 0; j < Na; ++j) {
          const T cs = std::cos(ph[j]), sn = std::sin(ph[j]);
          const T u0 = o[2 * j], u1 = o[2 * j + 1];
          o[2 * j] = cs * u0 - sn * u1;
          o[2 * j + 1] = sn * u0 + cs * u1;
        }
      }
    }
  }
}

template <typename T>
void Mamba3RotaryBackward(T* dphi, T* dCn, T* dBn, T* dC_bias, T* dB_bias,
                          T* dq, T* dk, const T* q, const T* k, const T* phi,
                          int64_t S, int64_t H, int64_t Dk, int64_t Na) {
  std::fill(dphi, dphi + S * H * Na, T(0));
  std::fill(dBn, dBn + S * Dk, T(0));
  std::fill(dCn, dCn + S * Dk, T(0));
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = t * H + h;
      const T* ph = phi + r * Na;
      T* dph = dphi + r * Na;
      for (const auto& [grad, rotated, dn, dbias] :
           {std::tuple{dk, k, dBn, dB_bias}, std::tuple{dq, q, dCn, dC_bias}}) {
        T* g = grad + r * Dk;
        const T* x = rotated + r * Dk;
        for (int64_t j = 0; j < Na; ++j) {
          const T cs = std::cos(ph[j]), sn = std::sin(ph[j]);
          const T g0 = g[2 * j], g1 = g[2 * j + 1];
          dph[j] += g1 * x[2 * j] - g0 * x[2 * j + 1];
          g[2 * j] = cs * g0 + sn * g1;
          g[2 * j + 1] = -sn * g0 + cs * g1;
        }
        for (int64_t c = 0; c < Dk; ++c) {
          dn[t * Dk + c] += g[c];
          dbias[h * Dk + c] += g[c];
        }
      }
    }
  }
}

template <typename T>
void Mamba3CoefficientsForward(T* a, T* gamma, T* beta, const T* A_proj,
                               const T* dt, const T* lam, int64_t n,
                               T a_floor) {
  for (int64_t i = 0; i < n; ++i) {
    const T d = dt[i], l = lam[i];
    a[i] = Mamba3DecayRate(A_proj[i], static_cast<double>(a_floor)) * d;
    gamma[i] = l * d;
    beta[i] = (T(1) - l) * d;
  }
}

template <typename T>
void Mamba3CoefficientsBackward(T* ddt, const T* da, const T* dgamma,
                                const T* dbeta, const T* A_proj, const T* lam,
                                int64_t n, T a_floor) {
  for (int64_t i = 0; i < n; ++i) {
    const T A = Mamba3DecayRate(A_proj[i], static_cast<double>(a_floor)), l = lam[i];
    ddt[i] = da[i] * A + dgamma[i] * l + dbeta[i] * (T(1) - l);
  }
}

template <typename T>
void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                             const T* silu_z, const T* D, int64_t S, int64_t H,
                             int64_t Dv) {
  for (int64_t r = 0; r < S * H; ++r) {
    const T Dh = D[r % H];
    const int64_t i = r * Dv;
    for (int64_t p = 0; p < Dv; ++p) {
      gated[i + p] = (o[i + p] + Dh * xv[i + p]) * silu_z[i + p];
    }
  }
}

template <typename T>
void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, T* dD, const T* dgated,
                              const T* o, const T* xv, const T* silu_z,
                              const T* D, int64_t S, int64_t H, int64_t Dv) {
  for (int64_t r = 0; r < S * H; ++r) {
    const int64_t h = r % H, i = r * Dv;
    T dD_r = 0;
    for (int64_t p = 0; p < Dv; ++p) {
      const T u = o[i + p] + D[h] * xv[i + p];
      const T du = dgated[i + p] * silu_z[i + p];
      dz[i + p] = dgated[i + p] * u;
      d_o[i + p] = du;
      dxv[i + p] = D[h] * du;
      dD_r += du * xv[i + p];
    }
    dD[h] += dD_r;
  }
}

#define SF_INSTANTIATE(T)                                                       \
  template T Mamba3HeavyTail<T>(T);                                             \
  template T Mamba3HeavyTailGrad<T>(T);                                         \
  template T Mamba3DecayRate<T>(T, double);                                     \
  template void Mamba3GatesForward<T>(T*, T*, T*, const T*, int64_t, int64_t,   \
                                      int64_t);                                 \
  template void Mamba3GatesBackward<T>(T*, T*, T*, T*, const T*, const T*,      \
                                       const T*, const T*, const T*, const T*,  \
                                       int64_t, int64_t, T);                    \
  template void Mamba3AnglesForward<T>(T*, T*, const T*, const T*, const T*,    \
                                       int64_t, int64_t, int64_t, int64_t);     \
  template void Mamba3AnglesBackward<T>(T*, T*, T*, const T*, const T*,         \
                                        const T*, const T*, int64_t, int64_t,   \
                                        int64_t, int64_t);                      \
  template void Mamba3RotaryForward<T>(T*, T*, const T*, const T*, const T*,    \
                                       const T*, const T*, int64_t, int64_t,    \
                                       int64_t, int64_t);                       \
  template void Mamba3RotaryBackward<T>(T*, T*, T*, T*, T*, T*, T*, const T*,   \
                                        const T*, const T*, int64_t, int64_t,   \
                                        int64_t, int64_t);                      \
  template void Mamba3CoefficientsForward<T>(T*, T*, T*, const T*, const T*,    \
                                             const T*, int64_t, T);             \
  template void Mamba3CoefficientsBackward<T>(T*, const T*, const T*, const T*, \
                                              const T*, const T*, int64_t, T);  \
  template void Mamba3GateOutputForward<T>(T*, const T*, const T*, const T*,    \
                                           const T*, int64_t, int64_t,          \
                                           int64_t);                            \
  template void Mamba3GateOutputBackward<T>(T*, T*, T*, T*, const T*, const T*, \
                                            const T*, const T*, const T*,       \
                                            int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend
