#include "backend/kernels/short_conv.h"

#include <algorithm>
#include <vector>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

// Throughout: xbar = [tail_in; x], (W-1+T, C); x_t is xbar row t+W-1, so tap
// j of output t reads xbar row t+W-1-j, which lies in the tail when t < j.

template <typename T>
void ShortConvForward(T* y, T* tail_out, const T* x, const T* w,
                      const T* tail_in, int64_t T_len, int64_t C, int64_t W) {
  Mat<T> Y(y, T_len, C);                  // (T, C)
  CMat<T> X(x, T_len, C);                 // (T, C)
  CMat<T> Wt(w, W, C);                    // (W, C)
  Y.setZero();
  for (int64_t j = 0; j < W; ++j) {
    const int64_t n_in_x = std::max<int64_t>(T_len - j, 0);
    Y.bottomRows(n_in_x).array() +=
        X.topRows(n_in_x).array().rowwise() * Wt.row(j).array();
    if (tail_in == nullptr) continue;
    CMat<T> tail(tail_in, W - 1, C);      // (W-1, C)
    const int64_t n_in_tail = std::min(j, T_len);  // outputs t < j
    Y.topRows(n_in_tail).array() +=
        tail.middleRows(W - 1 - j, n_in_tail).array().rowwise() *
        Wt.row(j).array();
  }
  if (tail_out == nullptr) return;
  Mat<T> tail_o(tail_out, W - 1, C);      // (W-1, C)
  for (int64_t m = 0; m < W - 1; ++m) {   // tail_out[m] = xbar[T + m]
    const int64_t p = T_len + m;
    if (p >= W - 1) {
      tail_o.row(m) = X.row(p - (W - 1));
    } else if (tail_in != nullptr) {
      tail_o.row(m) = CMat<T>(tail_in, W - 1, C).row(p);
    } else {
      tail_o.row(m).setZero();
    }
  }
}

template <typename T>
void ShortConvBackward(T* dx, T* dtail_in, T* dw, const T* dy,
                       const T* dtail_out, const T* x, const T* w,
                       const T* tail_in, int64_t T_len, int64_t C, int64_t W) {
  Mat<T> dX(dx, T_len, C);                // (T, C)
  CMat<T> dY(dy, T_len, C);               // (T, C)
  CMat<T> X(x, T_len, C);                 // (T, C)
  CMat<T> Wt(w, W, C);                    // (W, C)
  Mat<T> dWt(dw, W, C);                   // (W, C)
  // dtb (W-1, C): d(tail_in), kept even when the caller does not want it.
  RowMat<T> dtb = RowMat<T>::Zero(W - 1, C);
  dX.setZero();
  for (int64_t j = 0; j < W; ++j) {
    const int64_t n_in_x = std::max<int64_t>(T_len - j, 0);
    // Outputs t >= j read x_{t-j}.
    dX.topRows(n_in_x).array() +=
        dY.bottomRows(n_in_x).array().rowwise() * Wt.row(j).array();
    dWt.row(j) += (dY.bottomRows(n_in_x).array() * X.topRows(n_in_x).array())
                      .colwise().sum().matrix();
    // Outputs t < j read tail row t+W-1-j.
    const int64_t n_in_tail = std::min(j, T_len);
    dtb.middleRows(W - 1 - j, n_in_tail).array() +=
        dY.topRows(n_in_tail).array().rowwise() * Wt.row(j).array();
    if (tail_in != nullptr) {
      CMat<T> tail(tail_in, W - 1, C);    // (W-1, C)
      dWt.row(j) += (dY.topRows(n_in_tail).array() *
                     tail.middleRows(W - 1 - j, n_in_tail).array())
                        .colwise().sum().matrix();
    }
  }
  if (dtail_out != nullptr) {
    CMat<T> dto(dtail_out, W - 1, C);     // (W-1, C)
    for (int64_t m = 0; m < W - 1; ++m) {  // tail_out[m] = xbar[T + m]
      const int64_t p = T_len + m;
      if (p >= W - 1) {
        dX.row(p - (W - 1)) += dto.row(m);
      } else {
        dtb.row(p) += dto.row(m);
      }
    }
  }
  if (dtail_in != nullptr) Mat<T>(dtail_in, W - 1, C) = dtb;
}

#define SF_INSTANTIATE(T)                                                    \
  template void ShortConvForward<T>(T*, T*, const T*, const T*, const T*,    \
                                    int64_t, int64_t, int64_t);              \
  template void ShortConvBackward<T>(T*, T*, T*, const T*, const T*,         \
                                     const T*, const T*, const T*, int64_t,  \
                                     int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

namespace {

// xbar row p, channel c (zeros for a missing tail).
double XbarRef(const double* x, const double* tail_in, int64_t p, int64_t c,
               int64_t C, int64_t W) {
  if (p >= W - 1) return x[(p - (W - 1)) * C + c];
  return tail_in != nullptr ? tail_in[p * C + c] : 0.0;
}

}  // namespace

void ShortConvForwardRef(double* y, double* tail_out, const double* x,
                         const double* w, const double* tail_in,
                         int64_t T_len, int64_t C, int64_t W) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < W; ++j) {
        acc += w[j * C + c] * XbarRef(x, tail_in, t + W - 1 - j, c, C, W);
      }
      y[t * C + c] = acc;
    }
  }
  if (tail_out == nullptr) return;
  for (int64_t m = 0; m < W - 1; ++m) {
    for (int64_t c = 0; c < C; ++c) {
      tail_out[m * C + c] = XbarRef(x, tail_in, T_len + m, c, C, W);
    }
  }
}

// Reverse mode through xbar: d(xbar) (W-1+T, C) collects every use of a row.
void ShortConvBackwardRef(double* dx, double* dtail_in, double* dw,
                          const double* dy, const double* dtail_out,
                          const double* x, const double* w,
                          const double* tail_in, int64_t T_len, int64_t C,
                          int64_t W) {
  std::vector<double> dxbar((W - 1 + T_len) * C, 0.0);
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < W; ++j) {
        const int64_t p = t + W - 1 - j;
        dxbar[p * C + c] += w[j * C + c] * dy[t * C + c];
        dw[j * C + c] += dy[t * C + c] * XbarRef(x, tail_in, p, c, C, W);
      }
    }
  }
  if (dtail_out != nullptr) {
    for (int64_t m = 0; m < W - 1; ++m) {
      for (int64_t c = 0; c < C; ++c) {
        dxbar[(T_len + m) * C + c] += dtail_out[m * C + c];
      }
    }
  }
  for (int64_t i = 0; i < T_len * C; ++i) dx[i] = dxbar[(W - 1) * C + i];
  if (dtail_in != nullptr) {
    for (int64_t i = 0; i < (W - 1) * C; ++i) dtail_in[i] = dxbar[i];
  }
}

}  // namespace stateflow::backend
