// Turning CUDA, cuBLAS and NCCL error codes into Status values with the call
// and the library's own message: "cudaMalloc: out of memory".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "common/status.h"

namespace stateflow::backend {

inline Status CudaStatus(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(call) + ": " + cudaGetErrorString(rc));
}
inline Status CublasStatus(cublasStatus_t rc, const char* call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(call) + ": " + cublasGetStatusString(rc));
}
inline Status NcclStatus(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return Status::Ok();
  return Status::Internal(std::string(call) + ": " + ncclGetErrorString(rc));
}

}  // namespace stateflow::backend

#define SF_CUDA_RETURN_IF_ERROR(call) SF_RETURN_IF_ERROR(::stateflow::backend::CudaStatus((call), #call))
#define SF_CUBLAS_RETURN_IF_ERROR(call) SF_RETURN_IF_ERROR(::stateflow::backend::CublasStatus((call), #call))
#define SF_NCCL_RETURN_IF_ERROR(call) SF_RETURN_IF_ERROR(::stateflow::backend::NcclStatus((call), #call))
