// SF_HD marks a function that runs on both sides of the device seam: compiled
// by nvcc it is `__host__ __device__` (a CUDA kernel calls it per element, per
// row or per tile); compiled by the host compiler it is an ordinary inline
// function that the host-grid device (grid_device.h) and the CPU tests call.
// One definition of each kernel's arithmetic, tested on the CPU, run on the
// GPU.
//
//   SF_HD inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
#pragma once

#if defined(__CUDACC__)
#define SF_HD __host__ __device__
#define SF_DEVICE_CODE 1
#else
#define SF_HD
#define SF_DEVICE_CODE 0
#endif
