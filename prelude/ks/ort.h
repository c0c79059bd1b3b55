// ks/ort.h — a package's exports as ONNX Runtime custom ops, for packages built with backend = "ort".
//
// src/P_ort.cpp (generated) describes each export as a ks::ort::Op: its name, its input and output
// element types, and a compute function that reads the input shapes, binds the export's dims, asks
// ONNX Runtime for the outputs and calls the export's C function. Its RegisterCustomOps, the entry
// point that onnxruntime's SessionOptions.register_custom_ops_library calls, adds them all to the
// operator domain "ksbuild.P". Only ONNX Runtime's C API header is needed to compile (the session
// passes the API in at run time, so the library does not link ONNX Runtime).
//
// Not runtime-free: the custom-op library allocates its kernels and each call's workspace. The
// static library libP.a of the same build stays plain (runtime-free) C++.
#ifndef KS_ORT_H
#define KS_ORT_H

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "onnxruntime_c_api.h"

namespace ks {
namespace ort {

constexpr size_t max_rank = 16;  // the most axes an input may have
// The C API version the ops ask for: 16 (onnxruntime 1.16) has every function they call, and the
// V2 kernel callbacks (CreateKernelV2, KernelComputeV2) that return errors as statuses.
constexpr uint32_t api_version = 16;

// One call of a custom op: its inputs, outputs and workspace, and the first error met. After an
// error every accessor returns a null pointer or zero, and status() says what went wrong.
class Call {
public:
    Call(const OrtApi* api, OrtKernelContext* context, const char* op) : api_(api), context_(context), op_(op) {}
    ~Call() { std::free(workspace_); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // The size of an input's axis (an error when the input has fewer axes).
    int64_t dim(size_t input, size_t axis) {
        int64_t shape[max_rank];
        size_t rank = shape_of(input, shape);
        if (!failed() && axis >= rank)
            fail("input %zu has %zu axes; axis %zu is one of this export's dims", input, rank, axis);
        return failed() ? 0 : shape[axis];
    }

    // An error unless the input has exactly this shape.
    void expect(size_t input, std::initializer_list<int64_t> want) {
        int64_t shape[max_rank];
        size_t rank = shape_of(input, shape);
        if (failed())
            return;
        if (rank != want.size()) {
            fail("input %zu must have %zu axes, not %zu", input, want.size(), rank);
            return;
        }
        size_t axis = 0;
        for (int64_t size : want) {
            if (shape[axis] != size)
                fail("input %zu must have size %lld along axis %zu, not %lld", input, static_cast<long long>(size),
                     axis, static_cast<long long>(shape[axis]));
            ++axis;
        }
    }

    template <class T>
    const T* input(size_t i) { return static_cast<const T*>(data_of(input_value(i))); }

    template <class T>
    T scalar(size_t i) {
        const T* p = input<T>(i);
        return p ? *p : T();
    }

    // The output i, allocated by ONNX Runtime with this shape (a negative size is an error).
    template <class T>
    T* output(size_t i, std::initializer_list<int64_t> shape) {
        for (int64_t size : shape)
            if (size < 0 && !failed())
                fail("output %zu would have a negative size along an axis: the inputs are too small", i);
        OrtValue* value = nullptr;
        if (!failed())
            check(api_->KernelContext_GetOutput(context_, i, shape.begin(), shape.size(), &value));
        return static_cast<T*>(data_of(value));
    }

    void* workspace(size_t bytes) {
        if (bytes == 0 || failed())
            return nullptr;
        workspace_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!workspace_)
            fail("cannot allocate %zu bytes of workspace", bytes);
        return workspace_;
    }

    // The status to return to ONNX Runtime after the export returned `code` (0 = ok).
    OrtStatus* finish(int code) {
        if (!failed() && code != 0)
            fail("the export returned status %d (see the package header's status codes)", code);
        return status();
    }

    bool failed() const { return status_ != nullptr; }
    OrtStatus* status() {
        OrtStatus* s = status_;
        status_ = nullptr;
        return s;
    }

private:
    const OrtValue* input_value(size_t i) {
        const OrtValue* value = nullptr;
        if (!failed())
            check(api_->KernelContext_GetInput(context_, i, &value));
        return value;
    }

    size_t shape_of(size_t input, int64_t* shape) {
        const OrtValue* value = input_value(input);
        OrtTensorTypeAndShapeInfo* info = nullptr;
        size_t rank = 0;
        if (value && check(api_->GetTensorTypeAndShape(value, &info)) && check(api_->GetDimensionsCount(info, &rank))) {
            if (rank > max_rank)
                fail("input %zu has %zu axes; at most %zu are supported", input, rank, max_rank);
            else
                check(api_->GetDimensions(info, shape, rank));
        }
        if (info)
            api_->ReleaseTensorTypeAndShapeInfo(info);
        return failed() ? 0 : rank;
    }

    void* data_of(const OrtValue* value) {
        void* data = nullptr;
        if (value && !failed())
            check(api_->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
        return data;
    }

    bool check(OrtStatus* s) {
        if (s && !status_)
            status_ = s;
        else if (s)
            api_->ReleaseStatus(s);
        return s == nullptr;
    }

    template <class... A>
    void fail(const char* format, A... args) {
        char text[320];
        int n = std::snprintf(text, sizeof text, "ksbuild op %s: ", op_);
        std::snprintf(text + n, sizeof text - static_cast<size_t>(n), format, args...);
        check(api_->CreateStatus(ORT_INVALID_ARGUMENT, text));
    }

    const OrtApi* api_;
    OrtKernelContext* context_;
    const char* op_;
    OrtStatus* status_ = nullptr;
    void* workspace_ = nullptr;
};

using Compute = OrtStatus* (*)(Call&);

// One export as a custom op. `base` comes first: ONNX Runtime hands its address back to the callbacks.
struct Op {
    OrtCustomOp base;
    const char* name;
    const ONNXTensorElementDataType* ins;
    size_t n_ins;
    const ONNXTensorElementDataType* outs;
    size_t n_outs;
    Compute compute;
};

struct Kernel {
    const OrtApi* api;
    const Op* op;
};

inline const Op& op_of(const OrtCustomOp* base) { return *reinterpret_cast<const Op*>(base); }

namespace callbacks {
inline const char* ORT_API_CALL name(const OrtCustomOp* op) { return op_of(op).name; }
inline const char* ORT_API_CALL provider(const OrtCustomOp*) { return "CPUExecutionProvider"; }
inline ONNXTensorElementDataType ORT_API_CALL input_type(const OrtCustomOp* op, size_t i) { return op_of(op).ins[i]; }
inline size_t ORT_API_CALL input_count(const OrtCustomOp* op) { return op_of(op).n_ins; }
inline ONNXTensorElementDataType ORT_API_CALL output_type(const OrtCustomOp* op, size_t i) { return op_of(op).outs[i]; }
inline size_t ORT_API_CALL output_count(const OrtCustomOp* op) { return op_of(op).n_outs; }
inline OrtCustomOpInputOutputCharacteristic ORT_API_CALL required(const OrtCustomOp*, size_t) {
    return INPUT_OUTPUT_REQUIRED;
}
inline OrtMemType ORT_API_CALL memory(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
inline int ORT_API_CALL one(const OrtCustomOp*) { return 1; }
inline int ORT_API_CALL last_version(const OrtCustomOp*) { return INT_MAX; }

inline OrtStatus* ORT_API_CALL create(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo*, void** kernel) {
    *kernel = new Kernel{api, &op_of(op)};
    return nullptr;
}

inline OrtStatus* ORT_API_CALL compute(void* kernel, OrtKernelContext* context) {
    const Kernel& k = *static_cast<Kernel*>(kernel);
    Call call(k.api, context, k.op->name);
    return k.op->compute(call);
}

inline void ORT_API_CALL destroy(void* kernel) { delete static_cast<Kernel*>(kernel); }
}  // namespace callbacks

// The record ONNX Runtime reads for one export (CreateKernelV2/KernelComputeV2: errors come back as statuses).
inline Op make_op(const char* name, const ONNXTensorElementDataType* ins, size_t n_ins,
                  const ONNXTensorElementDataType* outs, size_t n_outs, Compute compute) {
    Op op{};
    op.base.version = api_version;  // (ORT reads no field newer than this)
    op.base.GetName = callbacks::name;
    op.base.GetExecutionProviderType = callbacks::provider;
    op.base.GetInputType = callbacks::input_type;
    op.base.GetInputTypeCount = callbacks::input_count;
    op.base.GetOutputType = callbacks::output_type;
    op.base.GetOutputTypeCount = callbacks::output_count;
    op.base.GetInputCharacteristic = callbacks::required;
    op.base.GetOutputCharacteristic = callbacks::required;
    op.base.GetInputMemoryType = callbacks::memory;
    op.base.GetVariadicInputMinArity = callbacks::one;
    op.base.GetVariadicInputHomogeneity = callbacks::one;
    op.base.GetVariadicOutputMinArity = callbacks::one;
    op.base.GetVariadicOutputHomogeneity = callbacks::one;
    op.base.CreateKernelV2 = callbacks::create;
    op.base.KernelComputeV2 = callbacks::compute;
    op.base.KernelDestroy = callbacks::destroy;
    op.base.GetStartVersion = callbacks::one;
    op.base.GetEndVersion = callbacks::last_version;
    op.name = name;
    op.ins = ins;
    op.n_ins = n_ins;
    op.outs = outs;
    op.n_outs = n_outs;
    op.compute = compute;
    return op;
}

// Adds `ops` to the custom op domain `domain` of a session's options.
inline OrtStatus* register_ops(OrtSessionOptions* options, const OrtApiBase* base, const char* domain, Op* ops,
                               size_t n) {
    const OrtApi* api = base->GetApi(api_version);
    if (!api)
        return base->GetApi(1)->CreateStatus(ORT_FAIL, "ksbuild: the custom ops need onnxruntime 1.16 or newer");
    OrtCustomOpDomain* d = nullptr;  // (kept for the life of the process: sessions refer to it)
    OrtStatus* s = api->CreateCustomOpDomain(domain, &d);
    for (size_t i = 0; i < n && !s; ++i)
        s = api->CustomOpDomain_Add(d, &ops[i].base);
    return s ? s : api->AddCustomOpDomain(options, d);
}

}  // namespace ort
}  // namespace ks

#endif  // KS_ORT_H
