// GPU test (label gpu): every kernel of GridOps and GridAttentionOps run on
// a CUDA device (CudaExec: one thread per index, GEMMs in cuBLAS; the
// overlapped GDN, Mamba-3 and KDA cores on two streams with events) against
// the same kernels on the host-grid device (HostExec), from the same inputs:
// float64 within 1e-11 relative (the device may contract a*b+c into an FMA),
// float32 within 1e-4. The host-grid results are themselves tested against
// the CPU kernels and the float64 references (tests/backend/grid_*_test.cc),
// so agreement here carries those checks to the GPU.
//
// With no CUDA device every test is SKIPPED with the reason (never passed).
// Written and compiled on a machine without a GPU: it has not run on one.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_attention_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/device/gdn_ops.h"
#include "backend/device/host_grid_device.h"
#include "backend/device/kda_ops.h"
#include "backend/device/mamba3_ops.h"
#include "backend/kernels/attention.h"
#include "backend/kernels/gdn_core.h"
#include "backend/kernels/kda_core.h"
#include "backend/kernels/mamba3_core.h"
#include "backend/kernels/rope.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

// Where a case's buffers live: host vectors (host-grid) or device memory.
class Space {
 public:
  explicit Space(bool device) : device_(device) {}
  Space(const Space&) = delete;
  Space& operator=(const Space&) = delete;
  ~Space() {
    for (void* p : device_ptrs_) cudaFree(p);
  }
  template <typename T>
  T* Put(const std::vector<T>& host) {
    if (!device_) {
      host_bufs_.push_back(std::make_shared<std::vector<char>>(
          reinterpret_cast<const char*>(host.data()),
          reinterpret_cast<const char*>(host.data() + host.size())));
      host_bufs_.back()->resize(host.size() * sizeof(T) + 1);  // never empty
      return reinterpret_cast<T*>(host_bufs_.back()->data());
    }
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T) + 1), cudaSuccess);
    device_ptrs_.push_back(p);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    return static_cast<T*>(p);
  }
  template <typename T>
  Buffer Get(const T* p, int64_t n) {
    std::vector<T> out(n);
    if (device_) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
    }
    return ToDouble(out);
  }

 private:
  bool device_;
  std::vector<std::shared_ptr<std::vector<char>>> host_bufs_;
  std::vector<void*> device_ptrs_;
};

using Outputs = std::vector<std::pair<std::string, Buffer>>;
// The kernels a case runs on one device: those every family shares,
// attention's, and each recurrent family's.
template <typename T>
struct Kernels {
  Ops<T>& ops;
  AttentionOps<T>& attn;
  GdnOps<T>& gdn;
  Mamba3Ops<T>& m3;
  KdaOps<T>& kda;
};
template <typename T>
using Case = std::function<Outputs(Kernels<T>&, Space&)>;

class CudaGridOps : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device (" << cudaGetErrorString(err) << "): not run";
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(handle_, stream_), CUBLAS_STATUS_SUCCESS);
    // Stream 0 is stream_; stream 1 the overlapped GDN and Mamba-3 cores' side.
    streams_.stream[0] = stream_;
    streams_.handle[0] = handle_;
    ASSERT_EQ(cudaStreamCreate(&streams_.stream[1]), cudaSuccess);
    ASSERT_EQ(cublasCreate(&streams_.handle[1]), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(streams_.handle[1], streams_.stream[1]), CUBLAS_STATUS_SUCCESS);
    for (cudaEvent_t& e : streams_.event) {
      ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    }
  }
  void TearDown() override {
    for (cudaEvent_t e : streams_.event) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (streams_.handle[1] != nullptr) cublasDestroy(streams_.handle[1]);
    if (streams_.stream[1] != nullptr) cudaStreamDestroy(streams_.stream[1]);
    if (handle_ != nullptr) cublasDestroy(handle_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs `c` on the host-grid device and on the GPU and compares every output.
  template <typename T>
  void Compare(const std::string& what, const Case<T>& c) {
    SCOPED_TRACE(what + (std::is_same_v<T, double> ? " (double)" : " (float)"));
    std::unique_ptr<Ops<T>> gpu_ops;
    std::unique_ptr<AttentionOps<T>> gpu_attn;
    if constexpr (std::is_same_v<T, double>) {
      gpu_ops = MakeCudaOpsF64(&streams_);
      gpu_attn = MakeCudaAttentionOpsF64(handle_, stream_);
    } else {
      gpu_ops = MakeCudaOpsF32(&streams_);
      gpu_attn = MakeCudaAttentionOpsF32(handle_, stream_);
    }
    std::unique_ptr<GdnOps<T>> gpu_gdn = MakeCudaGdnOps<T>(&streams_);
    std::unique_ptr<Mamba3Ops<T>> gpu_m3 = MakeCudaMamba3Ops<T>(&streams_);
    std::unique_ptr<KdaOps<T>> gpu_kda = MakeCudaKdaOps<T>(&streams_);
    Device& hg = HostGridDevice();
    Kernels<T> host_k{hg.ops<T>(), *hg.attention_ops<T>(), *GdnOpsOf<T>(hg), *Mamba3OpsOf<T>(hg),
                      *KdaOpsOf<T>(hg)};
    Kernels<T> gpu_k{*gpu_ops, *gpu_attn, *gpu_gdn, *gpu_m3, *gpu_kda};
    Space host(false), device(true);
    const Outputs want = c(host_k, host);
    const Outputs got = c(gpu_k, device);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const double tol = std::is_same_v<T, double> ? 1e-11 : 1e-4;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(AllClose(want[i].first, got[i].second, want[i].second, tol, tol, tol));
    }
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  CudaStreams streams_;
};

template <typename T>
std::vector<T> Rand(uint64_t seed, int64_t n, double lo, double hi) {
  std::mt19937_64 rng(seed);
  return Cast<T>(RandomVector(rng, n, lo, hi));
}

template <typename T>
Case<T> DenseCase() {
  return [](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t N = 37, C = 24, D = 19, F = 40;
    T* x = sp.Put(Rand<T>(1, N * C, -1, 1));
    T* w = sp.Put(Rand<T>(2, D * C, -1, 1));
    T* b = sp.Put(Rand<T>(3, D, -1, 1));
    T* y = sp.Put(std::vector<T>(N * D));
    T* dy = sp.Put(Rand<T>(4, N * D, -1, 1));
    T* dx = sp.Put(std::vector<T>(N * C));
    T* dw = sp.Put(std::vector<T>(D * C, T(0.5)));
    T* db = sp.Put(std::vector<T>(D, T(0.5)));
    kn.ops.LinearForward(y, x, w, b, N, C, D);
    kn.ops.LinearBackward(dx, dw, db, dy, x, w, N, C, D);
    T* rn_y = sp.Put(std::vector<T>(N * C));
    T* rstd = sp.Put(std::vector<T>(N));
    T* nw = sp.Put(Rand<T>(5, C, 0.5, 1.5));
    T* rn_dx = sp.Put(std::vector<T>(N * C));
    T* rn_dw = sp.Put(std::vector<T>(C));
    T* rn_dy = sp.Put(Rand<T>(6, N * C, -1, 1));
    kn.ops.RmsNormForward(rn_y, rstd, x, nw, N, C, T(1e-6));
    kn.ops.RmsNormBackward(rn_dx, rn_dw, rn_dy, x, nw, rstd, N, C);
    T* wg = sp.Put(Rand<T>(7, F * C, -0.5, 0.5));
    T* wu = sp.Put(Rand<T>(8, F * C, -0.5, 0.5));
    T* wd = sp.Put(Rand<T>(9, C * F, -0.5, 0.5));
    T* my = sp.Put(std::vector<T>(N * C));
    T* gate = sp.Put(std::vector<T>(N * F));
    T* up = sp.Put(std::vector<T>(N * F));
    T* h = sp.Put(std::vector<T>(N * F));
    T* ws = sp.Put(std::vector<T>(2 * N * F));
    T* mdx = sp.Put(std::vector<T>(N * C));
    T* dwg = sp.Put(std::vector<T>(F * C));
    T* dwu = sp.Put(std::vector<T>(F * C));
    T* dwd = sp.Put(std::vector<T>(C * F));
    kn.ops.SwigluMlpForward(my, gate, up, h, x, wg, wu, wd, N, C, F);
    kn.ops.SwigluMlpBackward(mdx, dwg, dwu, dwd, ws, rn_dy, gate, up, x, wg, wu, wd, N, C, F);
    return {{"linear y", sp.Get(y, N * D)},     {"linear dx", sp.Get(dx, N * C)},
            {"linear dw", sp.Get(dw, D * C)},   {"linear db", sp.Get(db, D)},
            {"rmsnorm y", sp.Get(rn_y, N * C)}, {"rmsnorm dx", sp.Get(rn_dx, N * C)},
            {"rmsnorm dw", sp.Get(rn_dw, C)},   {"mlp y", sp.Get(my, N * C)},
            {"mlp dx", sp.Get(mdx, N * C)},     {"mlp dwg", sp.Get(dwg, F * C)},
            {"mlp dwu", sp.Get(dwu, F * C)},    {"mlp dwd", sp.Get(dwd, C * F)}};
  };
}

template <typename T>
Case<T> ElementwiseCase() {
  return [](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t n = 5000, T_len = 50, H = 4, C = 12, W = 4, R = 30, Dn = 16;
    T* a = sp.Put(Rand<T>(11, n, -6, 6));
    T* b = sp.Put(Rand<T>(12, n, -1, 1));
    T* y = sp.Put(std::vector<T>(n));
    T* y2 = sp.Put(std::vector<T>(n));
    kn.ops.SiluForward(y, a, n);
    kn.ops.SiluBackward(y2, b, a, n);
    kn.ops.Add(y2, y, n);
    kn.ops.Mul(y, y, b, n);
    T* m = sp.Put(Rand<T>(13, n, -0.1, 0.1));
    T* v = sp.Put(Rand<T>(14, n, 0, 0.01));
    AdamWCoefficients<T> c{T(0.9), T(0.1), T(0.95), T(0.05), T(1e-3), T(1.2), T(1e-8), T(1e-4)};
    kn.ops.AdamWUpdate(a, m, v, b, n, c);
    const double sum = kn.ops.Sum(y2, n);
    // Gate, beta, short conv, L2 norm.
    T* ga = sp.Put(Rand<T>(15, T_len * H, -25, 25));
    T* A_log = sp.Put(Rand<T>(16, H, -1, 1));
    T* dt = sp.Put(Rand<T>(17, H, -1, 1));
    T* g = sp.Put(std::vector<T>(T_len * H));
    T* dg = sp.Put(Rand<T>(18, T_len * H, -1, 1));
    T* da = sp.Put(std::vector<T>(T_len * H));
    T* dA = sp.Put(std::vector<T>(H));
    T* ddt = sp.Put(std::vector<T>(H));
    T* beta = sp.Put(std::vector<T>(T_len * H));
    T* dbeta_in = sp.Put(std::vector<T>(T_len * H));
    kn.gdn.GdnGateForward(g, ga, A_log, dt, T_len, H);
    kn.gdn.GdnGateBackward(da, dA, ddt, dg, ga, A_log, dt, T_len, H);
    kn.ops.SigmoidForward(beta, ga, T_len * H);
    kn.ops.SigmoidBackward(dbeta_in, dg, beta, T_len * H);
    T* cx = sp.Put(Rand<T>(19, T_len * C, -1, 1));
    T* cw = sp.Put(Rand<T>(20, W * C, -1, 1));
    T* tail = sp.Put(Rand<T>(21, (W - 1) * C, -1, 1));
    T* cy = sp.Put(std::vector<T>(T_len * C));
    T* tail_out = sp.Put(std::vector<T>((W - 1) * C));
    T* cdy = sp.Put(Rand<T>(22, T_len * C, -1, 1));
    T* cdx = sp.Put(std::vector<T>(T_len * C));
    T* dtail = sp.Put(std::vector<T>((W - 1) * C));
    T* cdw = sp.Put(std::vector<T>(W * C));
    kn.ops.ShortConvForward(cy, tail_out, cx, cw, tail, T_len, C, W);
    kn.ops.ShortConvBackward(cdx, dtail, cdw, cdy, tail, cx, cw, tail, T_len, C, W);
    T* lx = sp.Put(Rand<T>(23, R * Dn, -1, 1));
    T* ly = sp.Put(std::vector<T>(R * Dn));
    T* lr = sp.Put(std::vector<T>(R));
    T* ldx = sp.Put(std::vector<T>(R * Dn));
    kn.ops.L2NormForward(ly, lr, lx, R, Dn, T(0.25), T(1e-6));
    // dy independent of x: with dy = x, dx is exactly zero and its computed
    // values are rounding noise (the first GPU run compared that noise).
    T* ldy = sp.Put(Rand<T>(30, R * Dn, -1, 1));
    kn.ops.L2NormBackward(ldx, ldy, lx, lr, R, Dn, T(0.25));
    // GELU (in place: dx aliases dy, y aliases x) and LayerNorm with a row
    // far from zero.
    T* gx = sp.Put(Rand<T>(24, n, -6, 6));
    T* gdx = sp.Put(Rand<T>(25, n, -1, 1));
    kn.ops.GeluBackward(gdx, gdx, gx, n);
    kn.ops.GeluForward(gx, gx, n);
    std::vector<T> nx_h = Rand<T>(26, R * Dn, -2, 2);
    for (int64_t c = 0; c < Dn; ++c) nx_h[c] += T(100);
    T* nx = sp.Put(nx_h);
    T* nw = sp.Put(Rand<T>(27, Dn, 0.5, 1.5));
    T* nb = sp.Put(Rand<T>(28, Dn, -1, 1));
    T* ny = sp.Put(std::vector<T>(R * Dn));
    T* nmean = sp.Put(std::vector<T>(R));
    T* nrstd = sp.Put(std::vector<T>(R));
    T* ndy = sp.Put(Rand<T>(29, R * Dn, -1, 1));
    T* ndx = sp.Put(std::vector<T>(R * Dn));
    T* ndw = sp.Put(std::vector<T>(Dn, T(0.5)));
    T* ndb = sp.Put(std::vector<T>(Dn, T(0.5)));
    kn.ops.LayerNormForward(ny, nmean, nrstd, nx, nw, nb, R, Dn, T(1e-5));
    kn.ops.LayerNormBackward(ndx, ndw, ndb, ndy, nx, nw, nmean, nrstd, R, Dn);
    return {{"silu*b", sp.Get(y, n)},       {"sum", Buffer{sum}},
            {"adamw w", sp.Get(a, n)},      {"adamw m", sp.Get(m, n)},
            {"adamw v", sp.Get(v, n)},      {"g", sp.Get(g, T_len * H)},
            {"da", sp.Get(da, T_len * H)},  {"dA_log", sp.Get(dA, H)},
            {"ddt_bias", sp.Get(ddt, H)},   {"db", sp.Get(dbeta_in, T_len * H)},
            {"conv y", sp.Get(cy, T_len * C)}, {"conv tail", sp.Get(tail_out, (W - 1) * C)},
            {"conv dx", sp.Get(cdx, T_len * C)}, {"conv dtail", sp.Get(dtail, (W - 1) * C)},
            {"conv dw", sp.Get(cdw, W * C)}, {"l2 y", sp.Get(ly, R * Dn)},
            {"l2 dx", sp.Get(ldx, R * Dn)}, {"gelu y", sp.Get(gx, n)},
            {"gelu dx", sp.Get(gdx, n)},      {"ln y", sp.Get(ny, R * Dn)},
            {"ln mean", sp.Get(nmean, R)},    {"ln rstd", sp.Get(nrstd, R)},
            {"ln dx", sp.Get(ndx, R * Dn)},   {"ln dw", sp.Get(ndw, Dn)},
            {"ln db", sp.Get(ndb, Dn)}};
  };
}

template <typename T>
Case<T> EmbeddingAndLossCase() {
  return [](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t N = 21, C = 16, V = 53, Vs = 16;
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 7) % 5);  // repeats
    const int32_t* d_ids = sp.Put(ids);
    T* table = sp.Put(Rand<T>(31, V * C, -1, 1));
    T* e = sp.Put(std::vector<T>(N * C));
    T* dtable = sp.Put(std::vector<T>(V * C));
    T* edy = sp.Put(Rand<T>(32, N * C, -1, 1));
    kn.ops.EmbeddingForward(e, d_ids, table, N, C, V);
    kn.ops.EmbeddingBackward(dtable, edy, d_ids, N, C, V);
    T* losses = sp.Put(std::vector<T>(N));
    T* lse = sp.Put(std::vector<T>(N));
    T* logits = sp.Put(std::vector<T>(N * Vs));
    T* dx = sp.Put(std::vector<T>(N * C));
    T* dw = sp.Put(std::vector<T>(V * C));
    T* dl = sp.Put(std::vector<T>(N, T(1) / T(N)));
    const double mean = kn.ops.OutputLossForward(losses, lse, logits, e, table, d_ids, N, C, V, Vs);
    kn.ops.OutputLossBackward(dx, dw, logits, dl, lse, e, table, d_ids, N, C, V, Vs);
    return {{"embedding y", sp.Get(e, N * C)}, {"dtable", sp.Get(dtable, V * C)},
            {"mean loss", Buffer{mean}},       {"losses", sp.Get(losses, N)},
            {"lse", sp.Get(lse, N)},           {"loss dx", sp.Get(dx, N * C)},
            {"loss dw", sp.Get(dw, V * C)}};
  };
}

// overlapped: the two-stream cores (at bs = 32: 5 blocks in 4 segments);
// st_tile: the ST launch's block shape (5 does not divide Dv).
template <typename T>
Case<T> GdnCoreCase(bool overlapped = false, int64_t st_tile = 0,
                    int64_t bs = kGdnBlockSize) {
  return [=](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t T_len = 150, H = 3, Dk = 16, Dv = 12;
    const int64_t nk = T_len * H * Dk, nv = T_len * H * Dv, ns = H * Dv * Dk;
    T* q = sp.Put(Rand<T>(41, nk, -0.25, 0.25));
    T* k = sp.Put(Rand<T>(42, nk, -0.25, 0.25));
    T* v = sp.Put(Rand<T>(43, nv, -1, 1));
    T* g = sp.Put(Rand<T>(44, T_len * H, -0.5, -0.01));
    T* beta = sp.Put(Rand<T>(45, T_len * H, 0.05, 0.95));
    T* S_in = sp.Put(Rand<T>(46, ns, -0.5, 0.5));
    T* o = sp.Put(std::vector<T>(nv));
    T* S_out = sp.Put(std::vector<T>(ns));
    T* wsf = sp.Put(std::vector<T>(kn.gdn.GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto fwd = overlapped ? &GdnOps<T>::GdnCoreForwardOverlapped : &GdnOps<T>::GdnCoreForward;
    (kn.gdn.*fwd)(o, S_out, wsf, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, bs, st_tile);
    T* dO = sp.Put(Rand<T>(47, nv, -1, 1));
    T* dS_out = sp.Put(Rand<T>(48, ns, -1, 1));
    T* dq = sp.Put(std::vector<T>(nk));
    T* dk = sp.Put(std::vector<T>(nk));
    T* dv = sp.Put(std::vector<T>(nv));
    T* dg = sp.Put(std::vector<T>(T_len * H));
    T* dbeta = sp.Put(std::vector<T>(T_len * H));
    T* dS_in = sp.Put(std::vector<T>(ns));
    T* wsb = sp.Put(std::vector<T>(kn.gdn.GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto bwd = overlapped ? &GdnOps<T>::GdnCoreBackwardOverlapped : &GdnOps<T>::GdnCoreBackward;
    (kn.gdn.*bwd)(dq, dk, dv, dg, dbeta, dS_in, wsb, dO, dS_out, q, k, v, g, beta, S_in, T_len, H,
               Dk, Dv, bs, st_tile);
    return {{"o", sp.Get(o, nv)},        {"S_out", sp.Get(S_out, ns)},
            {"dq", sp.Get(dq, nk)},      {"dk", sp.Get(dk, nk)},
            {"dv", sp.Get(dv, nv)},      {"dg", sp.Get(dg, T_len * H)},
            {"dbeta", sp.Get(dbeta, T_len * H)}, {"dS_in", sp.Get(dS_in, ns)}};
  };
}

// The KDA gate and core (per-channel decay): overlapped, the two-stream
// core (at bs = 32: 5 blocks in 4 segments); st_tile as for GDN.
template <typename T>
Case<T> KdaCase(bool overlapped = false, int64_t st_tile = 0, int64_t bs = kKdaBlockSize) {
  return [=](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t T_len = 150, H = 3, Dk = 16, Dv = 12;
    const int64_t nk = T_len * H * Dk, nv = T_len * H * Dv, ns = H * Dv * Dk;
    T* a = sp.Put(Rand<T>(61, nk, -4, 2));
    T* A_log = sp.Put(Rand<T>(62, H, 0, 2.7));
    T* dt_bias = sp.Put(Rand<T>(63, H * Dk, -2.5, -1.5));
    T* g = sp.Put(std::vector<T>(nk));
    kn.kda.KdaGateForward(g, a, A_log, dt_bias, T_len, H, Dk);
    T* q = sp.Put(Rand<T>(64, nk, -0.25, 0.25));
    T* k = sp.Put(Rand<T>(65, nk, -0.25, 0.25));
    T* v = sp.Put(Rand<T>(66, nv, -1, 1));
    T* beta = sp.Put(Rand<T>(67, T_len * H, 0.05, 0.95));
    T* S_in = sp.Put(Rand<T>(68, ns, -0.5, 0.5));
    T* o = sp.Put(std::vector<T>(nv));
    T* S_out = sp.Put(std::vector<T>(ns));
    T* wsf = sp.Put(std::vector<T>(kn.kda.KdaCoreForwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto fwd = overlapped ? &KdaOps<T>::KdaCoreForwardOverlapped : &KdaOps<T>::KdaCoreForward;
    (kn.kda.*fwd)(o, S_out, wsf, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, bs, st_tile);
    T* dO = sp.Put(Rand<T>(69, nv, -1, 1));
    T* dS_out = sp.Put(Rand<T>(70, ns, -1, 1));
    T* dq = sp.Put(std::vector<T>(nk));
    T* dk = sp.Put(std::vector<T>(nk));
    T* dv = sp.Put(std::vector<T>(nv));
    T* dg = sp.Put(std::vector<T>(nk));
    T* dbeta = sp.Put(std::vector<T>(T_len * H));
    T* dS_in = sp.Put(std::vector<T>(ns));
    T* wsb = sp.Put(std::vector<T>(kn.kda.KdaCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto bwd = overlapped ? &KdaOps<T>::KdaCoreBackwardOverlapped : &KdaOps<T>::KdaCoreBackward;
    (kn.kda.*bwd)(dq, dk, dv, dg, dbeta, dS_in, wsb, dO, dS_out, q, k, v, g, beta, S_in, T_len, H,
                  Dk, Dv, bs, st_tile);
    T* da = sp.Put(std::vector<T>(nk));
    T* dA = sp.Put(std::vector<T>(H));
    T* ddt = sp.Put(std::vector<T>(H * Dk));
    kn.kda.KdaGateBackward(da, dA, ddt, dg, a, A_log, dt_bias, T_len, H, Dk);
    return {{"g", sp.Get(g, nk)},          {"o", sp.Get(o, nv)},
            {"S_out", sp.Get(S_out, ns)},  {"dq", sp.Get(dq, nk)},
            {"dk", sp.Get(dk, nk)},        {"dv", sp.Get(dv, nv)},
            {"dg", sp.Get(dg, nk)},        {"dbeta", sp.Get(dbeta, T_len * H)},
            {"dS_in", sp.Get(dS_in, ns)},  {"da", sp.Get(da, nk)},
            {"dA_log", sp.Get(dA, H)},     {"ddt_bias", sp.Get(ddt, H * Dk)}};
  };
}

// overlapped: the two-stream core (at bs = 32: 5 blocks, the last short, in
// segments of 1, 1, 1, 2; at bs = 16: 10 blocks in 2, 3, 2, 3). st_tile:
// the ST launches' block shape (5 does not divide Dv).
template <typename T>
Case<T> Mamba3CoreCase(bool overlapped = false, int64_t bs = kMamba3BlockSize,
                       int64_t st_tile = 0) {
  return [=](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t T_len = 150, H = 3, Dk = 16, Dv = 12;
    const int64_t nk = T_len * H * Dk, nv = T_len * H * Dv, ns = H * Dv * Dk, nh = T_len * H;
    T* q = sp.Put(Rand<T>(61, nk, -1, 1));
    T* k = sp.Put(Rand<T>(62, nk, -1, 1));
    T* v = sp.Put(Rand<T>(63, nv, -1, 1));
    T* a = sp.Put(Rand<T>(64, nh, -0.5, -0.01));
    T* gamma = sp.Put(Rand<T>(65, nh, 0.01, 0.3));
    T* beta = sp.Put(Rand<T>(66, nh, 0.01, 0.3));
    T* S_in = sp.Put(Rand<T>(67, ns, -0.5, 0.5));
    T* k_in = sp.Put(Rand<T>(68, H * Dk, -1, 1));
    T* v_in = sp.Put(Rand<T>(69, H * Dv, -1, 1));
    T* o = sp.Put(std::vector<T>(nv));
    T* S_out = sp.Put(std::vector<T>(ns));
    T* k_out = sp.Put(std::vector<T>(H * Dk));
    T* v_out = sp.Put(std::vector<T>(H * Dv));
    T* wsf = sp.Put(std::vector<T>(kn.m3.Mamba3CoreForwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto fwd = overlapped ? &Mamba3Ops<T>::Mamba3CoreForwardOverlapped : &Mamba3Ops<T>::Mamba3CoreForward;
    (kn.m3.*fwd)(o, S_out, k_out, v_out, wsf, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len,
               H, Dk, Dv, bs, st_tile);
    T* dO = sp.Put(Rand<T>(70, nv, -1, 1));
    T* dS_out = sp.Put(Rand<T>(71, ns, -1, 1));
    T* dk_out = sp.Put(Rand<T>(72, H * Dk, -1, 1));
    T* dv_out = sp.Put(Rand<T>(73, H * Dv, -1, 1));
    T* dq = sp.Put(std::vector<T>(nk));
    T* dk = sp.Put(std::vector<T>(nk));
    T* dv = sp.Put(std::vector<T>(nv));
    T* da = sp.Put(std::vector<T>(nh));
    T* dgamma = sp.Put(std::vector<T>(nh));
    T* dbeta = sp.Put(std::vector<T>(nh));
    T* dS_in = sp.Put(std::vector<T>(ns));
    T* dk_in = sp.Put(std::vector<T>(H * Dk));
    T* dv_in = sp.Put(std::vector<T>(H * Dv));
    T* wsb = sp.Put(std::vector<T>(kn.m3.Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, bs)));
    auto bwd = overlapped ? &Mamba3Ops<T>::Mamba3CoreBackwardOverlapped : &Mamba3Ops<T>::Mamba3CoreBackward;
    (kn.m3.*bwd)(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, wsb, dO, dS_out, dk_out,
               dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv, bs,
               st_tile);
    return {{"o", sp.Get(o, nv)},           {"S_out", sp.Get(S_out, ns)},
            {"k_out", sp.Get(k_out, H * Dk)}, {"v_out", sp.Get(v_out, H * Dv)},
            {"dq", sp.Get(dq, nk)},         {"dk", sp.Get(dk, nk)},
            {"dv", sp.Get(dv, nv)},         {"da", sp.Get(da, nh)},
            {"dgamma", sp.Get(dgamma, nh)}, {"dbeta", sp.Get(dbeta, nh)},
            {"dS_in", sp.Get(dS_in, ns)},   {"dk_in", sp.Get(dk_in, H * Dk)},
            {"dv_in", sp.Get(dv_in, H * Dv)}};
  };
}

// The Mamba-3 layer's per-token ops: gates, coefficients, the angle scan,
// the rotation, the D skip and z gate, each forward and backward.
template <typename T>
Case<T> Mamba3PrepCase() {
  return [](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t B = 2, Ts = 40, S = B * Ts, H = 3, N = 8, Na = 2, P = 5;
    T* dt = sp.Put(Rand<T>(81, S * H, -2, 2));
    T* lam = sp.Put(Rand<T>(82, S * H, -3, 3));
    T* theta = sp.Put(Rand<T>(83, S * Na, -2, 2));
    T* A = sp.Put(Rand<T>(84, S * H, -3, 2));
    T* dt_bias = sp.Put(Rand<T>(85, H, -1, 1));
    kn.m3.Mamba3GatesForward(dt, lam, theta, dt_bias, S, H, Na);
    T* a = sp.Put(std::vector<T>(S * H));
    T* gamma = sp.Put(std::vector<T>(S * H));
    T* beta = sp.Put(std::vector<T>(S * H));
    kn.m3.Mamba3CoefficientsForward(a, gamma, beta, A, dt, lam, S * H, T(0.5));
    T* angle_in = sp.Put(Rand<T>(86, B * H * Na, 0, 6));
    T* phi = sp.Put(std::vector<T>(S * H * Na));
    T* angle_out = sp.Put(std::vector<T>(B * H * Na));
    kn.m3.Mamba3AnglesForward(phi, angle_out, theta, dt, angle_in, B, Ts, H, Na);
    T* Cn = sp.Put(Rand<T>(87, S * N, -1, 1));
    T* Bn = sp.Put(Rand<T>(88, S * N, -1, 1));
    T* Cb = sp.Put(Rand<T>(89, H * N, -1, 1));
    T* Bb = sp.Put(Rand<T>(90, H * N, -1, 1));
    T* q = sp.Put(std::vector<T>(S * H * N));
    T* k = sp.Put(std::vector<T>(S * H * N));
    kn.m3.Mamba3RotaryForward(q, k, Cn, Bn, Cb, Bb, phi, S, H, N, Na);
    T* o = sp.Put(Rand<T>(91, S * H * P, -1, 1));
    T* xv = sp.Put(Rand<T>(92, S * H * P, -1, 1));
    T* sz = sp.Put(Rand<T>(93, S * H * P, -1, 1));
    T* D = sp.Put(Rand<T>(94, H, -1, 1));
    T* gated = sp.Put(std::vector<T>(S * H * P));
    kn.m3.Mamba3GateOutputForward(gated, o, xv, sz, D, S, H, P);
    // Backward, in the layer's order.
    T* dgated = sp.Put(Rand<T>(95, S * H * P, -1, 1));
    T* dz = sp.Put(std::vector<T>(S * H * P));
    T* d_o = sp.Put(std::vector<T>(S * H * P));
    T* dxv = sp.Put(std::vector<T>(S * H * P));
    T* dD = sp.Put(std::vector<T>(H, T(0.5)));
    kn.m3.Mamba3GateOutputBackward(dz, d_o, dxv, dD, dgated, o, xv, sz, D, S, H, P);
    T* da = sp.Put(Rand<T>(96, S * H, -1, 1));
    T* dgamma = sp.Put(Rand<T>(97, S * H, -1, 1));
    T* dbeta = sp.Put(Rand<T>(98, S * H, -1, 1));
    T* ddt = sp.Put(std::vector<T>(S * H));
    kn.m3.Mamba3CoefficientsBackward(ddt, da, dgamma, dbeta, A, lam, S * H, T(0.5));
    T* dq = sp.Put(Rand<T>(99, S * H * N, -1, 1));
    T* dk = sp.Put(Rand<T>(100, S * H * N, -1, 1));
    T* dphi = sp.Put(std::vector<T>(S * H * Na));
    T* dCn = sp.Put(std::vector<T>(S * N));
    T* dBn = sp.Put(std::vector<T>(S * N));
    T* dCb = sp.Put(std::vector<T>(H * N, T(0.5)));
    T* dBb = sp.Put(std::vector<T>(H * N, T(0.5)));
    kn.m3.Mamba3RotaryBackward(dphi, dCn, dBn, dCb, dBb, dq, dk, q, k, phi, S, H, N, Na);
    T* dtheta = sp.Put(std::vector<T>(S * Na));
    T* dangle_in = sp.Put(std::vector<T>(B * H * Na));
    T* dangle_out = sp.Put(Rand<T>(101, B * H * Na, -1, 1));
    kn.m3.Mamba3AnglesBackward(dtheta, ddt, dangle_in, dphi, theta, dt, dangle_out, B, Ts, H, Na);
    T* ddA = sp.Put(std::vector<T>(S * H));
    T* dtrap = sp.Put(std::vector<T>(S * H));
    T* ddt_bias = sp.Put(std::vector<T>(H, T(0.5)));
    kn.m3.Mamba3GatesBackward(ddA, dtrap, ddt, ddt_bias, da, dgamma, dbeta, A, dt, lam, S, H,
                            T(0.5));
    return {{"a", sp.Get(a, S * H)},          {"gamma", sp.Get(gamma, S * H)},
            {"beta", sp.Get(beta, S * H)},    {"phi", sp.Get(phi, S * H * Na)},
            {"angle_out", sp.Get(angle_out, B * H * Na)}, {"q", sp.Get(q, S * H * N)},
            {"k", sp.Get(k, S * H * N)},      {"gated", sp.Get(gated, S * H * P)},
            {"dz", sp.Get(dz, S * H * P)},    {"d_o", sp.Get(d_o, S * H * P)},
            {"dxv", sp.Get(dxv, S * H * P)},  {"dD", sp.Get(dD, H)},
            {"dCn", sp.Get(dCn, S * N)},      {"dBn", sp.Get(dBn, S * N)},
            {"dC_bias", sp.Get(dCb, H * N)},  {"dB_bias", sp.Get(dBb, H * N)},
            {"dtheta", sp.Get(dtheta, S * Na)}, {"dangle_in", sp.Get(dangle_in, B * H * Na)},
            {"ddt", sp.Get(ddt, S * H)},      {"ddA", sp.Get(ddA, S * H)},
            {"dtrap", sp.Get(dtrap, S * H)},  {"ddt_bias", sp.Get(ddt_bias, H)}};
  };
}

template <typename T>
Case<T> AttentionCase() {
  return [](Kernels<T>& kn, Space& sp) -> Outputs {
    const int64_t s = 70, start = 30, Hq = 4, Hkv = 2, d = 16, keys = start + s;
    T* q = sp.Put(Rand<T>(51, s * Hq * d, -1, 1));
    T* k = sp.Put(Rand<T>(52, keys * Hkv * d, -1, 1));
    T* v = sp.Put(Rand<T>(53, keys * Hkv * d, -1, 1));
    kn.attn.RopeForward(q, s, Hq, d, start, kRopeTheta);
    kn.attn.RopeForward(k, keys, Hkv, d, 0, kRopeTheta);
    T* o = sp.Put(std::vector<T>(s * Hq * d));
    T* lse = sp.Put(std::vector<T>(s * Hq));
    kn.attn.AttentionForward(o, lse, q, k, v, s, start, Hq, Hkv, d, kAttentionQueryTile,
                          kAttentionKeyTile);
    T* dO = sp.Put(Rand<T>(54, s * Hq * d, -1, 1));
    T* dq = sp.Put(std::vector<T>(s * Hq * d));
    T* dk = sp.Put(std::vector<T>(keys * Hkv * d));
    T* dv = sp.Put(std::vector<T>(keys * Hkv * d));
    T* D = sp.Put(std::vector<T>(s * Hq));
    kn.attn.AttentionBackward(dq, dk, dv, D, dO, o, lse, q, k, v, s, start, Hq, Hkv, d,
                           kAttentionQueryTile, kAttentionKeyTile);
    kn.attn.RopeBackward(dq, s, Hq, d, start, kRopeTheta);
    return {{"o", sp.Get(o, s * Hq * d)},         {"lse", sp.Get(lse, s * Hq)},
            {"dq (unrotated)", sp.Get(dq, s * Hq * d)}, {"dk", sp.Get(dk, keys * Hkv * d)},
            {"dv", sp.Get(dv, keys * Hkv * d)}};
  };
}

TEST_F(CudaGridOps, DenseKernels) {
  Compare<double>("dense", DenseCase<double>());
  Compare<float>("dense", DenseCase<float>());
}
TEST_F(CudaGridOps, ElementwiseRowsAndColumns) {
  Compare<double>("elementwise", ElementwiseCase<double>());
  Compare<float>("elementwise", ElementwiseCase<float>());
}
TEST_F(CudaGridOps, EmbeddingAndOutputLoss) {
  Compare<double>("embedding + loss", EmbeddingAndLossCase<double>());
  Compare<float>("embedding + loss", EmbeddingAndLossCase<float>());
}
TEST_F(CudaGridOps, GdnCore) {
  Compare<double>("gdn core", GdnCoreCase<double>());
  Compare<float>("gdn core", GdnCoreCase<float>());
}
// The two streams with events and the ST tile as the launch's block shape,
// against the host-grid device (whose overlapped cores equal its sequential
// ones bit for bit: grid_streams_test.cc).
TEST_F(CudaGridOps, GdnCoreOverlappedAndTiled) {
  Compare<double>("gdn core overlapped, B_V 5", GdnCoreCase<double>(true, 5, 32));
  Compare<float>("gdn core overlapped, B_V 5", GdnCoreCase<float>(true, 5, 32));
  Compare<double>("gdn core sequential, B_V 1", GdnCoreCase<double>(false, 1, 32));
}
TEST_F(CudaGridOps, Mamba3Core) {
  Compare<double>("mamba3 core", Mamba3CoreCase<double>());
  Compare<float>("mamba3 core", Mamba3CoreCase<float>());
}
// The Mamba-3 core on two streams with events, against the host-grid
// device (whose overlapped core equals its sequential one bit for bit:
// grid_streams_test.cc).
TEST_F(CudaGridOps, Mamba3CoreOverlapped) {
  Compare<double>("mamba3 core overlapped, bs 32", Mamba3CoreCase<double>(true, 32));
  Compare<float>("mamba3 core overlapped, bs 32", Mamba3CoreCase<float>(true, 32));
  Compare<double>("mamba3 core overlapped, bs 16", Mamba3CoreCase<double>(true, 16));
  Compare<float>("mamba3 core overlapped, bs 16", Mamba3CoreCase<float>(true, 16));
}
// The ST tile as the launches' block shape (one thread block per tile).
TEST_F(CudaGridOps, Mamba3CoreTiled) {
  Compare<double>("mamba3 core overlapped, B_V 5", Mamba3CoreCase<double>(true, 32, 5));
  Compare<float>("mamba3 core overlapped, B_V 5", Mamba3CoreCase<float>(true, 32, 5));
  Compare<double>("mamba3 core sequential, B_V 1", Mamba3CoreCase<double>(false, 32, 1));
}
TEST_F(CudaGridOps, KdaGateAndCore) {
  Compare<double>("kda gate and core", KdaCase<double>());
  Compare<float>("kda gate and core", KdaCase<float>());
  Compare<double>("kda core overlapped, bs 32", KdaCase<double>(true, 0, 32));
  Compare<float>("kda core overlapped, bs 32", KdaCase<float>(true, 0, 32));
}
TEST_F(CudaGridOps, KdaCoreTiled) {
  Compare<double>("kda core overlapped, B_V 5", KdaCase<double>(true, 5, 32));
  Compare<float>("kda core overlapped, B_V 5", KdaCase<float>(true, 5, 32));
  Compare<double>("kda core sequential, B_V 1", KdaCase<double>(false, 1));
}
TEST_F(CudaGridOps, Mamba3PerTokenOps) {
  Compare<double>("mamba3 per-token ops", Mamba3PrepCase<double>());
  Compare<float>("mamba3 per-token ops", Mamba3PrepCase<float>());
}
TEST_F(CudaGridOps, AttentionAndRope) {
  Compare<double>("attention", AttentionCase<double>());
  Compare<float>("attention", AttentionCase<float>());
}

}  // namespace
}  // namespace stateflow::backend
