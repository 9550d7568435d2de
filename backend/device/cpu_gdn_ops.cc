// The CPU device's Gated DeltaNet kernels (GdnOps, gdn_ops.h): the Eigen
// kernels of backend/kernels/gdn_prep.h and gdn_core.h, called exactly as
// the layer called them before the seam, so results are bit-identical.
#include <memory>
#include <type_traits>

#include "backend/device/gdn_ops.h"
#include "backend/kernels/gdn_core.h"
#include "backend/kernels/gdn_prep.h"

namespace stateflow::backend {
namespace {

template <typename T>
class CpuGdnOps final : public GdnOps<T> {
 public:
  void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                      int64_t T_len, int64_t H) override {
    backend::GdnGateForward<T>(g, a, A_log, dt_bias, T_len, H);
  }
  void GdnGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg,
                       const T* a, const T* A_log, const T* dt_bias,
                       int64_t T_len, int64_t H) override {
    backend::GdnGateBackward<T>(da, dA_log, ddt_bias, dg, a, A_log, dt_bias,
                                T_len, H);
  }
  int64_t GdnCoreForwardWorkspaceSize(int64_t, int64_t, int64_t, int64_t,
                                      int64_t) override {
    return 0;  // the CPU forward keeps its per-block temporaries itself
  }
  void GdnCoreForward(T* o, T* S_out, T* /*workspace*/, const T* q,
                      const T* k, const T* v, const T* g, const T* beta,
                      const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                      int64_t Dv, int64_t block_size,
                      int64_t st_tile = 0) override {
    backend::GdnCoreForward<T>(o, S_out, q, k, v, g, beta, S_in, T_len, H, Dk,
                               Dv, block_size, st_tile);
  }
  void GdnCoreForwardOverlapped(T* o, T* S_out, T* /*workspace*/, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const T* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile = 0) override {
    backend::GdnCoreForwardOverlapped<T>(o, S_out, q, k, v, g, beta, S_in,
                                         T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv,
                                       int64_t block_size) override {
    return backend::GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv,
                                                 block_size);
  }
  void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                       T* workspace, const T* dO, const T* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0) override {
    backend::GdnCoreBackward<T>(dq, dk, dv, dg, dbeta, dS_in, workspace, dO,
                                dS_out, q, k, v, g, beta, S_in, T_len, H, Dk,
                                Dv, block_size, st_tile);
  }
  void GdnCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta,
                                 T* dS_in, T* workspace, const T* dO,
                                 const T* dS_out, const T* q, const T* k,
                                 const T* v, const T* g, const T* beta,
                                 const T* S_in, int64_t T_len, int64_t H,
                                 int64_t Dk, int64_t Dv, int64_t block_size,
                                 int64_t st_tile = 0) override {
    backend::GdnCoreBackwardOverlapped<T>(dq, dk, dv, dg, dbeta, dS_in,
                                          workspace, dO, dS_out, q, k, v, g,
                                          beta, S_in, T_len, H, Dk, Dv,
                                          block_size, st_tile);
  }
  int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return backend::GdnCoreForwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                     block_size);
  }
  void GdnCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const T* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0) override {
    backend::GdnCoreForwardPhase<T>(phase, o, S_out, workspace, q, k, v, g,
                                    beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return backend::GdnCoreBackwardPhaseWorkspaceSize(T_len, H, Dk, Dv,
                                                      block_size);
  }
  void GdnCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, T* dS_in, T* workspace, const T* dO,
                            const T* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const T* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile = 0) override {
    backend::GdnCoreBackwardPhase<T>(phase, dq, dk, dv, dg, dbeta, dS_in,
                                     workspace, dO, dS_out, q, k, v, g, beta,
                                     S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
};

}  // namespace

template <typename T>
std::unique_ptr<GdnOps<T>> MakeCpuGdnOps() {
  if constexpr (std::is_same_v<T, bf16>) {
    return nullptr;  // the Eigen kernels are float and double
  } else {
    return std::make_unique<CpuGdnOps<T>>();
  }
}

template std::unique_ptr<GdnOps<float>> MakeCpuGdnOps<float>();
template std::unique_ptr<GdnOps<double>> MakeCpuGdnOps<double>();
template std::unique_ptr<GdnOps<bf16>> MakeCpuGdnOps<bf16>();

}  // namespace stateflow::backend
