// CopyTensor: a copy of a tensor counted by a given allocator. The layers
// save their inputs with it because an input may come from another
// allocator (a received activation, or, in single-process tests, another
// stage's), while what a layer keeps must be counted on its own stage.
// Tensor::CloneAs, by contrast, copies into the source's allocator.
// Not a view, a cast or a reshape: same shape, same element type.
//
//   SF_ASSIGN_OR_RETURN(saved->x, CopyTensor(*alloc_, BufferClass::kActivations, x));
#pragma once

#include "backend/tensor.h"

namespace stateflow::backend {

template <typename T>
Result<Tensor<T>> CopyTensor(TrackingAllocator& alloc, BufferClass cls,
                             const Tensor<T>& src) {
  SF_ASSIGN_OR_RETURN(Tensor<T> t,
                      Tensor<T>::Uninitialized(alloc, cls, src.shape()));
  if (src.numel() > 0) alloc.memory().Copy(t.data(), src.data(), src.bytes());
  return t;
}

}  // namespace stateflow::backend
