// gpudissect corpus: the only code the harness adds to a public kernel (corpus/README.md).
// GD_TIMES ends the kernel's parameter list with the timing buffer; GD_START reads the SM clock
// just before the measured loop, GD_STOP just after it and then (outside the timed span) stores
// lane 0's two clock values and its SM id: three 64-bit words per warp, warps numbered by
// block then by warp in the block.
#pragma once
#define GD_TIMES , long long *__restrict__ gd_times
#define GD_START long long gd_t0 = clock64();
#define GD_STOP                                                                                   \
    do {                                                                                          \
        long long gd_t1 = clock64();                                                              \
        unsigned gd_tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);    \
        if ((gd_tid & 31u) == 0) {                                                                \
            unsigned gd_sm;                                                                       \
            asm volatile("mov.u32 %0, %%smid;" : "=r"(gd_sm));                                    \
            unsigned long long gd_w =                                                             \
                (unsigned long long)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) * \
                    ((blockDim.x * blockDim.y * blockDim.z + 31u) / 32u) + gd_tid / 32u;          \
            gd_times[3 * gd_w] = gd_t0;                                                           \
            gd_times[3 * gd_w + 1] = gd_t1;                                                       \
            gd_times[3 * gd_w + 2] = gd_sm;                                                       \
        }                                                                                         \
    } while (0)
