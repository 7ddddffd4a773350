// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/stdint.cuh -- the fixed-width integer types for the device
// headers, under nvcc (<stdint.h>) and under NVRTC, which has no <stdint.h>.
#ifndef CUDAQ_REALTIME_STDINT_CUH
#define CUDAQ_REALTIME_STDINT_CUH

#ifdef __CUDACC_RTC__
// NVRTC has no <stdint.h>. Use CCCL's <cuda/std/cstdint> where it is on the include path,
// else declare the fixed-width types exactly as it does under NVRTC (so the two can meet).
#ifndef CUDAQ_REALTIME_RTC_STDINT
#define CUDAQ_REALTIME_RTC_STDINT
#if defined(__has_include) && __has_include(<cuda/std/cstdint>)
#include <cuda/std/cstdint>
#else
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef long long intptr_t;
typedef unsigned long long uintptr_t;
#endif
#endif
#else
#include <stdint.h>
#endif

#endif // CUDAQ_REALTIME_STDINT_CUH
