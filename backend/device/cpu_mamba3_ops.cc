// The CPU device's Mamba-3 kernels (Mamba3Ops, mamba3_ops.h): the Eigen
// kernels of backend/kernels/mamba3_prep.h and mamba3_core.h.
#include <memory>
#include <type_traits>

#include "backend/device/mamba3_ops.h"
#include "backend/kernels/mamba3_core.h"
#include "backend/kernels/mamba3_prep.h"

namespace stateflow::backend {
namespace {

template <typename T>
class CpuMamba3Ops final : public Mamba3Ops<T> {
 public:
  void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias,
                          int64_t S, int64_t H, int64_t Na) override {
    backend::Mamba3GatesForward<T>(dt, lam, theta, dt_bias, S, H, Na);
  }
  void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, T* ddt_bias, const T* da,
                           const T* dgamma, const T* dbeta, const T* A_proj,
                           const T* dt, const T* lam, int64_t S, int64_t H,
                           T a_floor) override {
    backend::Mamba3GatesBackward<T>(ddA, dtrap, ddt, ddt_bias, da, dgamma,
                                    dbeta, A_proj, dt, lam, S, H, a_floor);
  }
  void Mamba3AnglesForward(T* phi, T* angle_out, const T* theta, const T* dt,
                           const T* angle_in, int64_t B, int64_t Ts, int64_t H,
                           int64_t Na) override {
    backend::Mamba3AnglesForward<T>(phi, angle_out, theta, dt, angle_in, B, Ts,
                                    H, Na);
  }
  void Mamba3AnglesBackward(T* dtheta, T* ddt, T* dangle_in, T* dphi,
                            const T* theta, const T* dt, const T* dangle_out,
                            int64_t B, int64_t Ts, int64_t H,
                            int64_t Na) override {
    backend::Mamba3AnglesBackward<T>(dtheta, ddt, dangle_in, dphi, theta, dt,
                                     dangle_out, B, Ts, H, Na);
  }
  void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                           const T* C_bias, const T* B_bias, const T* phi,
                           int64_t S, int64_t H, int64_t Dk,
                           int64_t Na) override {
    backend::Mamba3RotaryForward<T>(q, k, Cn, Bn, C_bias, B_bias, phi, S, H, Dk,
                                    Na);
  }
  void Mamba3RotaryBackward(T* dphi, T* dCn, T* dBn, T* dC_bias, T* dB_bias,
                            T* dq, T* dk, const T* q, const T* k, const T* phi,
                            int64_t S, int64_t H, int64_t Dk,
                            int64_t Na) override {
    backend::Mamba3RotaryBackward<T>(dphi, dCn, dBn, dC_bias, dB_bias, dq, dk,
                                     q, k, phi, S, H, Dk, Na);
  }
  void Mamba3CoefficientsForward(T* a, T* gamma, T* beta, const T* A_proj,
                                 const T* dt, const T* lam, int64_t n,
                                 T a_floor) override {
    backend::Mamba3CoefficientsForward<T>(a, gamma, beta, A_proj, dt, lam, n,
                                          a_floor);
  }
  void Mamba3CoefficientsBackward(T* ddt, const T* da, const T* dgamma,
                                  const T* dbeta, const T* A_proj,
                                  const T* lam, int64_t n,
                                  T a_floor) override {
    backend::Mamba3CoefficientsBackward<T>(ddt, da, dgamma, dbeta, A_proj, lam,
                                           n, a_floor);
  }
  void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                               const T* silu_z, const T* D, int64_t S,
                               int64_t H, int64_t Dv) override {
    backend::Mamba3GateOutputForward<T>(gated, o, xv, silu_z, D, S, H, Dv);
  }
  void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, T* dD, const T* dgated,
                                const T* o, const T* xv, const T* silu_z,
                                const T* D, int64_t S, int64_t H,
                                int64_t Dv) override {
    backend::Mamba3GateOutputBackward<T>(dz, d_o, dxv, dD, dgated, o, xv,
                                         silu_z, D, S, H, Dv);
  }
  int64_t Mamba3CoreForwardWorkspaceSize(int64_t, int64_t, int64_t, int64_t,
                                         int64_t) override {
    return 0;  // the CPU forward keeps its per-block temporaries itself
  }
  void Mamba3CoreForward(T* o, T* S_out, T* k_out, T* v_out, T* /*workspace*/,
                         const T* q, const T* k, const T* v, const T* a,
                         const T* gamma, const T* beta, const T* S_in,
                         const T* k_in, const T* v_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreForward<T>(o, S_out, k_out, v_out, q, k, v, a, gamma,
                                  beta, S_in, k_in, v_in, T_len, H, Dk, Dv,
                                  block_size, st_tile);
  }
  void Mamba3CoreForwardOverlapped(T* o, T* S_out, T* k_out, T* v_out,
                                   T* /*workspace*/, const T* q, const T* k,
                                   const T* v, const T* a, const T* gamma,
                                   const T* beta, const T* S_in, const T* k_in,
                                   const T* v_in, int64_t T_len, int64_t H,
                                   int64_t Dk, int64_t Dv,
                                   int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreForwardOverlapped<T>(o, S_out, k_out, v_out, q, k, v, a,
                                            gamma, beta, S_in, k_in, v_in,
                                            T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                          int64_t Dv,
                                          int64_t block_size) override {
    return backend::Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv,
                                                    block_size);
  }
  void Mamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                          T* dS_in, T* dk_in, T* dv_in, T* workspace,
                          const T* dO, const T* dS_out, const T* dk_out,
                          const T* dv_out, const T* q, const T* k, const T* v,
                          const T* a, const T* gamma, const T* beta,
                          const T* S_in, const T* k_in, const T* v_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreBackward<T>(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in,
                                   dv_in, workspace, dO, dS_out, dk_out, dv_out,
                                   q, k, v, a, gamma, beta, S_in, k_in, v_in,
                                   T_len, H, Dk, Dv, block_size, st_tile);
  }
  void Mamba3CoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, T* dS_in, T* dk_in,
      T* dv_in, T* workspace, const T* dO, const T* dS_out, const T* dk_out,
      const T* dv_out, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const T* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreBackwardOverlapped<T>(
        dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace, dO,
        dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in,
        T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t Mamba3CoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                              int64_t Dk, int64_t Dv,
                                              int64_t block_size) override {
    return backend::Mamba3CoreForwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                        block_size);
  }
  void Mamba3CoreForwardPhase(CorePhase phase, T* o, T* S_out, T* k_out,
                              T* v_out, T* workspace, const T* q, const T* k,
                              const T* v, const T* a, const T* gamma,
                              const T* beta, const T* S_in, const T* k_in,
                              const T* v_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv,
                              int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreForwardPhase<T>(phase, o, S_out, k_out, v_out,
                                       workspace, q, k, v, a, gamma, beta,
                                       S_in, k_in, v_in, T_len, H, Dk, Dv,
                                       block_size, st_tile);
  }
  int64_t Mamba3CoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                               int64_t Dk, int64_t Dv,
                                               int64_t block_size) override {
    return backend::Mamba3CoreBackwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                         block_size);
  }
  void Mamba3CoreBackwardPhase(
      CorePhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      T* dS_in, T* dk_in, T* dv_in, T* workspace, const T* dO,
      const T* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const T* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) override {
    backend::Mamba3CoreBackwardPhase<T>(
        phase, dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace,
        dO, dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in,
        T_len, H, Dk, Dv, block_size, st_tile);
  }
};

}  // namespace

template <typename T>
std::unique_ptr<Mamba3Ops<T>> MakeCpuMamba3Ops() {
  if constexpr (std::is_same_v<T, bf16>) {
    return nullptr;  // the Eigen kernels are float and double
  } else {
    return std::make_unique<CpuMamba3Ops<T>>();
  }
}

template std::unique_ptr<Mamba3Ops<float>> MakeCpuMamba3Ops<float>();
template std::unique_ptr<Mamba3Ops<double>> MakeCpuMamba3Ops<double>();
template std::unique_ptr<Mamba3Ops<bf16>> MakeCpuMamba3Ops<bf16>();

}  // namespace stateflow::backend
