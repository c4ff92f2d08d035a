/* memra bench shim for FlashInfer's csrc/tvm_ffi_utils.h (absent here: it pulls in tvm-ffi).
 *
 * noAuxTcKernels.cu includes it for its tvm-ffi binding (the last namespace of the file,
 * flashinfer::trtllm_dsv3_fused_routing::NoAuxTc), which the benchmark never calls: it calls
 * tensorrt_llm::kernels::invokeNoAuxTc with raw device pointers (entry_flashinfer.cu). This
 * header declares just enough for that binding to compile unmodified; every function of it
 * aborts if ever reached. Written for the benchmark, not copied from FlashInfer. */
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace memra_shim
{
[[noreturn]] inline void unreachable(const char *what)
{
    std::fprintf(stderr, "memra bench shim: %s reached (the framework binding is not used)\n",
                 what);
    std::abort();
}
/* TVM_FFI_ICHECK(cond) << ...: a stream that aborts when a check fails. */
struct FatalStream {
    std::ostringstream os;
    template <typename T> FatalStream &operator<<(const T &v)
    {
        os << v;
        return *this;
    }
    ~FatalStream()
    {
        std::fprintf(stderr, "memra bench shim: check failed: %s\n", os.str().c_str());
        std::abort();
    }
};
} // namespace memra_shim

enum { kDLCPU = 1, kDLCUDA = 2 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };
struct DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
constexpr bool operator==(DLDataType a, DLDataType b)
{
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
struct DLDevice {
    int device_type;
    int device_id;
};

constexpr int64_t encode_dlpack_dtype(DLDataType t)
{
    return (int64_t(t.code) << 24) | (int64_t(t.bits) << 16) | int64_t(t.lanes);
}
constexpr int64_t float16_code = encode_dlpack_dtype(DLDataType{kDLFloat, 16, 1});
constexpr int64_t bfloat16_code = encode_dlpack_dtype(DLDataType{kDLBfloat, 16, 1});
constexpr int64_t float32_code = encode_dlpack_dtype(DLDataType{kDLFloat, 32, 1});
constexpr int64_t int32_code = encode_dlpack_dtype(DLDataType{kDLInt, 32, 1});

/* The tensor view the binding takes; never constructed by the benchmark. */
class TensorView
{
  public:
    DLDataType dtype() const
    {
        memra_shim::unreachable("TensorView::dtype");
    }
    std::vector<int64_t> sizes() const
    {
        memra_shim::unreachable("TensorView::sizes");
    }
    DLDevice device() const
    {
        memra_shim::unreachable("TensorView::device");
    }
    int64_t dim() const
    {
        memra_shim::unreachable("TensorView::dim");
    }
    int64_t ndim() const
    {
        memra_shim::unreachable("TensorView::ndim");
    }
    int64_t numel() const
    {
        memra_shim::unreachable("TensorView::numel");
    }
    void *data_ptr() const
    {
        memra_shim::unreachable("TensorView::data_ptr");
    }
};

namespace tvm
{
namespace ffi
{
template <typename T> class Optional
{
  public:
    bool has_value() const
    {
        return false;
    }
    T value() const
    {
        memra_shim::unreachable("Optional::value");
    }
};
} // namespace ffi
} // namespace tvm

inline cudaStream_t get_stream(DLDevice)
{
    memra_shim::unreachable("get_stream");
}

#define TVM_FFI_ICHECK(cond)                                                                       \
    if (cond) {                                                                                    \
    } else                                                                                         \
        ::memra_shim::FatalStream() << "TVM_FFI_ICHECK(" #cond ") "
#define CHECK_CONTIGUOUS(x) ((void)0)
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, fn)
