// The CPU device's Kimi Delta Attention kernels (KdaOps, kda_ops.h): the Eigen
// kernels of backend/kernels/kda_prep.h and kda_core.h.
#include <memory>
#include <type_traits>

#include "backend/device/kda_ops.h"
#include "backend/kernels/kda_core.h"
#include "backend/kernels/kda_prep.h"

namespace stateflow::backend {
namespace {

template <typename T>
class CpuKdaOps final : public KdaOps<T> {
 public:
  void KdaGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                      int64_t T_len, int64_t H, int64_t Dk) override {
    backend::KdaGateForward<T>(g, a, A_log, dt_bias, T_len, H, Dk);
  }
  void KdaGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg,
                       const T* a, const T* A_log, const T* dt_bias,
                       int64_t T_len, int64_t H, int64_t Dk) override {
    backend::KdaGateBackward<T>(da, dA_log, ddt_bias, dg, a, A_log, dt_bias,
                                T_len, H, Dk);
  }
  int64_t KdaCoreForwardWorkspaceSize(int64_t, int64_t, int64_t, int64_t,
                                      int64_t) override {
    return 0;  // the CPU forward keeps its per-block temporaries itself
  }
  void KdaCoreForward(T* o, T* S_out, T* /*workspace*/, const T* q,
                      const T* k, const T* v, const T* g, const T* beta,
                      const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                      int64_t Dv, int64_t block_size,
                      int64_t st_tile = 0) override {
    backend::KdaCoreForward<T>(o, S_out, q, k, v, g, beta, S_in, T_len, H, Dk,
                               Dv, block_size, st_tile);
  }
  void KdaCoreForwardOverlapped(T* o, T* S_out, T* /*workspace*/, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const T* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile = 0) override {
    backend::KdaCoreForwardOverlapped<T>(o, S_out, q, k, v, g, beta, S_in,
                                         T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t KdaCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv,
                                       int64_t block_size) override {
    return backend::KdaCoreBackwardWorkspaceSize(T_len, H, Dk, Dv,
                                                 block_size);
  }
  void KdaCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                       T* workspace, const T* dO, const T* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0) override {
    backend::KdaCoreBackward<T>(dq, dk, dv, dg, dbeta, dS_in, workspace, dO,
                                dS_out, q, k, v, g, beta, S_in, T_len, H, Dk,
                                Dv, block_size, st_tile);
  }
  void KdaCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta,
                                 T* dS_in, T* workspace, const T* dO,
                                 const T* dS_out, const T* q, const T* k,
                                 const T* v, const T* g, const T* beta,
                                 const T* S_in, int64_t T_len, int64_t H,
                                 int64_t Dk, int64_t Dv, int64_t block_size,
                                 int64_t st_tile = 0) override {
    backend::KdaCoreBackwardOverlapped<T>(dq, dk, dv, dg, dbeta, dS_in,
                                          workspace, dO, dS_out, q, k, v, g,
                                          beta, S_in, T_len, H, Dk, Dv,
                                          block_size, st_tile);
  }
  int64_t KdaCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return backend::KdaCoreForwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                     block_size);
  }
  void KdaCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const T* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0) override {
    backend::KdaCoreForwardPhase<T>(phase, o, S_out, workspace, q, k, v, g,
                                    beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t KdaCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return backend::KdaCoreBackwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                      block_size);
  }
  void KdaCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, T* dS_in, T* workspace, const T* dO,
                            const T* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const T* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile = 0) override {
    backend::KdaCoreBackwardPhase<T>(phase, dq, dk, dv, dg, dbeta, dS_in,
                                     workspace, dO, dS_out, q, k, v, g, beta,
                                     S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
};

}  // namespace

template <typename T>
std::unique_ptr<KdaOps<T>> MakeCpuKdaOps() {
  if constexpr (std::is_same_v<T, bf16>) {
    return nullptr;  // the Eigen kernels are float and double
  } else {
    return std::make_unique<CpuKdaOps<T>>();
  }
}

template std::unique_ptr<KdaOps<float>> MakeCpuKdaOps<float>();
template std::unique_ptr<KdaOps<double>> MakeCpuKdaOps<double>();
template std::unique_ptr<KdaOps<bf16>> MakeCpuKdaOps<bf16>();

}  // namespace stateflow::backend
