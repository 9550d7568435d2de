// Eigen aliases shared by the CPU kernels: row-major matrices and maps over
// the raw buffers the kernels take, so that a kernel can say
// `CMat<T>(x, R, C)` for "the (R, C) row-major buffer x".
//
// Not a tensor type (see backend/tensor.h), and nothing here allocates except
// the owning RowMat / Vec types.
//
//   CMat<float> x(x_ptr, R, C);          // const (R, C) view
//   Mat<float>(y_ptr, R, D).noalias() = x * w.transpose();
#pragma once

#include <Eigen/Core>
#include <cstdint>

namespace stateflow::backend {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic,
                             Eigen::RowMajor>;
template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using RowVec = Eigen::Matrix<T, 1, Eigen::Dynamic>;

// Views of contiguous row-major buffers.
template <typename T>
using Mat = Eigen::Map<RowMat<T>>;
template <typename T>
using CMat = Eigen::Map<const RowMat<T>>;
template <typename T>
using VecMap = Eigen::Map<Vec<T>>;
template <typename T>
using CVecMap = Eigen::Map<const Vec<T>>;

// Views with a row stride (e.g. one head's (T, d) slice of a (T, H, d)
// buffer: row stride H * d).
template <typename T>
using SMat = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using CSMat =
    Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
// Vectors with an element stride (e.g. one head's (T) slice of a (T, H)).
template <typename T>
using SVec = Eigen::Map<Vec<T>, Eigen::Unaligned, Eigen::InnerStride<>>;
template <typename T>
using CSVec = Eigen::Map<const Vec<T>, Eigen::Unaligned, Eigen::InnerStride<>>;

// References accepted by block-level functions: any row-major matrix or map
// whose rows are contiguous.
template <typename T>
using MatRef = Eigen::Ref<RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using CMatRef = Eigen::Ref<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using VecRef = Eigen::Ref<Vec<T>, 0, Eigen::InnerStride<>>;
template <typename T>
using CVecRef = Eigen::Ref<const Vec<T>, 0, Eigen::InnerStride<>>;

}  // namespace stateflow::backend
