/* memra bench shim for the libtorch-stable headers vLLM's topk_softmax_kernels.cu includes
 * (torch/csrc/stable/{accelerator,tensor}.h, torch/headeronly/{core/ScalarType,util/Exception}.h,
 * and vLLM's own libtorch_stable/torch_utils.h), absent here.
 *
 * The file's kernels and launchers (namespace vllm::moe) take raw pointers; its torch binding
 * (dispatch_topk_launch, topk_softmax, topk_sigmoid after `} // namespace vllm`) is never called
 * by the benchmark (entry_vllm.cu calls vllm::moe::topkGatingKernelLauncher). This header
 * declares just enough for the binding to compile unmodified; every function of it aborts if
 * ever reached. STD_TORCH_CHECK, which the launcher itself uses (a workspace check), throws
 * std::runtime_error, which the entry point catches. Written for the benchmark, not copied
 * from PyTorch or vLLM. */
#pragma once

#include <cuda_runtime.h>

#include <cassert>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <stdexcept>

namespace memra_shim
{
[[noreturn]] inline void unreachable(const char *what)
{
    std::fprintf(stderr, "memra bench shim: %s reached (the torch binding is not used)\n", what);
    std::abort();
}
} // namespace memra_shim

#define STD_TORCH_CHECK(cond, ...)                                                                 \
    do {                                                                                           \
        if (!(cond))                                                                               \
            throw std::runtime_error("STD_TORCH_CHECK(" #cond ") failed");                         \
    } while (0)

namespace torch
{
namespace headeronly
{
enum class ScalarType { Float, Half, BFloat16, Int, UInt32, Long };
} // namespace headeronly
namespace stable
{
class Tensor
{
  public:
    headeronly::ScalarType scalar_type() const
    {
        memra_shim::unreachable("Tensor::scalar_type");
    }
    int64_t dim() const
    {
        memra_shim::unreachable("Tensor::dim");
    }
    int64_t size(int64_t) const
    {
        memra_shim::unreachable("Tensor::size");
    }
    int64_t numel() const
    {
        memra_shim::unreachable("Tensor::numel");
    }
    bool is_contiguous() const
    {
        memra_shim::unreachable("Tensor::is_contiguous");
    }
    int32_t get_device_index() const
    {
        memra_shim::unreachable("Tensor::get_device_index");
    }
    const void *const_data_ptr() const
    {
        memra_shim::unreachable("Tensor::const_data_ptr");
    }
    template <typename T> const T *const_data_ptr() const
    {
        memra_shim::unreachable("Tensor::const_data_ptr<T>");
    }
    template <typename T> T *mutable_data_ptr() const
    {
        memra_shim::unreachable("Tensor::mutable_data_ptr<T>");
    }
};
inline Tensor new_empty(const Tensor &, std::initializer_list<int64_t>, headeronly::ScalarType)
{
    memra_shim::unreachable("torch::stable::new_empty");
}
namespace accelerator
{
struct DeviceGuard {
    explicit DeviceGuard(int32_t)
    {
        memra_shim::unreachable("DeviceGuard");
    }
};
} // namespace accelerator
} // namespace stable
} // namespace torch

inline cudaStream_t get_current_cuda_stream(int32_t)
{
    memra_shim::unreachable("get_current_cuda_stream");
}
