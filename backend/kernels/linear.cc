#include "backend/kernels/linear.h"
#include "backend/kernels/weight_grad_sink.h"

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

template <typename T>
void LinearForward(T* y, const T* x, const T* w, const T* b, int64_t R,
                   int64_t C, int64_t D) {
  Mat<T> Y(y, R, D);          // (R, D)
  CMat<T> X(x, R, C);         // (R, C)
  CMat<T> Wt(w, D, C);        // (D, C)
  Y.noalias() = X * Wt.transpose();
  if (b != nullptr) Y.rowwise() += CVecMap<T>(b, D).transpose();
}

template <typename T>
void LinearBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                    int64_t R, int64_t C, int64_t D) {
  if (WeightGradSink<T, T>* sink = ActiveWeightGradSink<T, T>(); sink != nullptr && dw != nullptr) {
    sink->DeferLinear(dw, db, dy, x, R, C, D);  // a split backward's W
    dw = db = nullptr;
  }
  CMat<T> dY(dy, R, D);       // (R, D)
  CMat<T> X(x, R, C);         // (R, C)
  if (dx != nullptr) Mat<T>(dx, R, C).noalias() = dY * CMat<T>(w, D, C);
  if (dw != nullptr) Mat<T>(dw, D, C).noalias() += dY.transpose() * X;
  if (db != nullptr) VecMap<T>(db, D) += dY.colwise().sum().transpose();
}

template void LinearForward<float>(float*, const float*, const float*,
                                   const float*, int64_t, int64_t, int64_t);
template void LinearForward<double>(double*, const double*, const double*,
                                    const double*, int64_t, int64_t, int64_t);
template void LinearBackward<float>(float*, float*, float*, const float*,
                                    const float*, const float*, int64_t,
                                    int64_t, int64_t);
template void LinearBackward<double>(double*, double*, double*, const double*,
                                     const double*, const double*, int64_t,
                                     int64_t, int64_t);

void LinearForwardRef(double* y, const double* x, const double* w,
                      const double* b, int64_t R, int64_t C, int64_t D) {
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t d = 0; d < D; ++d) {
      double acc = b != nullptr ? b[d] : 0.0;
      for (int64_t c = 0; c < C; ++c) acc += x[n * C + c] * w[d * C + c];
      y[n * D + d] = acc;
    }
  }
}

void LinearBackwardRef(double* dx, double* dw, double* db, const double* dy,
                       const double* x, const double* w, int64_t R, int64_t C,
                       int64_t D) {
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (int64_t d = 0; d < D; ++d) acc += dy[n * D + d] * w[d * C + c];
      if (dx != nullptr) dx[n * C + c] = acc;
    }
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t c = 0; c < C; ++c) dw[d * C + c] += dy[n * D + d] * x[n * C + c];
      if (db != nullptr) db[d] += dy[n * D + d];
    }
  }
}

}  // namespace stateflow::backend
