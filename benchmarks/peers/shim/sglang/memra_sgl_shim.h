/* memra bench shim for the SGLang JIT-kernel headers moe_fused_gate.cuh includes
 * (<sgl_kernel/utils.h>, <sgl_kernel/utils.cuh>, <tvm/ffi/container/tensor.h>), absent here.
 *
 * Unlike the other shims, this one is used: the benchmark calls the upstream host launcher
 * moe_fused_gate<fp32_t> itself (entry_sglang.cu), so its checks, grid arithmetic and
 * static/dynamic dispatch are SGLang's. What the launcher needs, with the meaning SGLang's
 * headers give it:
 *  - tvm::ffi::TensorView: a non-owning view (data pointer, dtype, shape, device);
 *  - host::RuntimeCheck(cond, msg...): throws when cond is false (SGLang's panics by throwing);
 *  - host::div_ceil;
 *  - host::LaunchKernel(grid, block, stream)(kernel, args...): cudaLaunchKernelEx with no launch
 *    attributes (so no PDL), throwing on an error; LaunchKernel::resolve_device(device) gives
 *    the caller's current stream (tvm-ffi's environment stream: here the one the entry point
 *    sets for the call);
 *  - fp32_t, fp16_t, bf16_t: float, __half, __nv_bfloat16.
 * Written for the benchmark, not copied from SGLang or tvm-ffi. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using fp32_t = float;
using fp16_t = __half;
using bf16_t = __nv_bfloat16;

struct DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
struct DLDevice {
    int device_type;
    int device_id;
};
enum { kDLFloat = 2, kDLCUDA = 2 };

namespace tvm
{
namespace ffi
{
class TensorView
{
  public:
    TensorView(void *data, DLDataType dtype, std::vector<int64_t> shape, DLDevice device)
        : data_(data), dtype_(dtype), shape_(std::move(shape)), device_(device)
    {
    }
    void *data_ptr() const
    {
        return data_;
    }
    DLDataType dtype() const
    {
        return dtype_;
    }
    int64_t dim() const
    {
        return (int64_t)shape_.size();
    }
    const std::vector<int64_t> &shape() const
    {
        return shape_;
    }
    DLDevice device() const
    {
        return device_;
    }

  private:
    void *data_;
    DLDataType dtype_;
    std::vector<int64_t> shape_;
    DLDevice device_;
};
} // namespace ffi
} // namespace tvm

namespace host
{
template <typename Cond, typename... Args> inline void RuntimeCheck(Cond &&cond, Args &&...args)
{
    if (!cond) {
        std::ostringstream os;
        (os << ... << args);
        throw std::runtime_error(os.str());
    }
}

inline constexpr int64_t div_ceil(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* The stream the launcher resolves a device to (tvm-ffi's environment stream). */
inline cudaStream_t &memra_shim_current_stream()
{
    static thread_local cudaStream_t s = nullptr;
    return s;
}

struct LaunchKernel {
    LaunchKernel(dim3 grid, dim3 block, cudaStream_t stream, std::size_t smem = 0) noexcept
    {
        config_ = cudaLaunchConfig_t{};
        config_.gridDim = grid;
        config_.blockDim = block;
        config_.dynamicSmemBytes = smem;
        config_.stream = stream;
        config_.numAttrs = 0;
    }
    LaunchKernel(const LaunchKernel &) = delete;
    LaunchKernel &operator=(const LaunchKernel &) = delete;
    static cudaStream_t resolve_device(DLDevice)
    {
        return memra_shim_current_stream();
    }
    template <typename K, typename... Args> void operator()(K &&kernel, Args &&...args) const
    {
        const cudaError_t r = cudaLaunchKernelEx(&config_, kernel, std::forward<Args>(args)...);
        if (r != cudaSuccess)
            throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(r));
    }

  private:
    cudaLaunchConfig_t config_;
};
} // namespace host
