// baselines.h: cuBLAS and cuDNN, loaded on first use with dlopen, for the only two users they
// have: the baseline columns of `g4cu bench --kernels` (bench_gemm.cu, bench_conv.cu) and the
// version lines of `g4cu --version`. Nothing links them, so a process that never asks (every
// CPU run, every inference run) never maps them (issue 34: ~0.3 s and ~227 MB per process).
//
// The headers stay a build dependency: each entry below is one function the callers use, with
// the prototype of its header (baselines.c checks each against the header at compile time).
// Where the library is looked for: G4_CUBLAS_LIB / G4_CUDNN_LIB when set (a file or soname: A/B
// against another version, or a missing one in tests), else the soname of the major version the
// headers name (libcublas.so.13, libcudnn.so.9) the way the loader finds it (LD_LIBRARY_PATH, the
// binary's RPATH, the system's paths), else that soname in the directory CMake found the library
// in at configure time.
#ifndef G4_BASELINES_H
#define G4_BASELINES_H

#include <cublas_api.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

// X(return type, function, (parameters)): the cuBLAS functions bench_gemm.cu and --version call.
#define G4_CUBLAS_FNS(X)                                                                           \
    X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle))                                  \
    X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle))                                   \
    X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId))          \
    X(cublasStatus_t, cublasSetWorkspace_v2,                                                       \
      (cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes))                       \
    X(cublasStatus_t, cublasGetProperty, (libraryPropertyType type, int *value))                   \
    X(cublasStatus_t, cublasGemmEx,                                                                \
      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,    \
       int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,        \
       cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,        \
       cublasComputeType_t computeType, cublasGemmAlgo_t algo))

// The cuDNN functions bench_conv.cu and --version call.
#define G4_CUDNN_FNS(X)                                                                            \
    X(size_t, cudnnGetVersion, (void))                                                             \
    X(const char *, cudnnGetErrorString, (cudnnStatus_t status))                                   \
    X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * handle))                                        \
    X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t handle))                                         \
    X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t handle, cudaStream_t streamId))                \
    X(cudnnStatus_t, cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t * tensorDesc))          \
    X(cudnnStatus_t, cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t tensorDesc))           \
    X(cudnnStatus_t, cudnnSetTensor4dDescriptor,                                                   \
      (cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType,   \
       int n, int c, int h, int w))                                                                \
    X(cudnnStatus_t, cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t * filterDesc))          \
    X(cudnnStatus_t, cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t filterDesc))           \
    X(cudnnStatus_t, cudnnSetFilter4dDescriptor,                                                   \
      (cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format,   \
       int k, int c, int h, int w))                                                                \
    X(cudnnStatus_t, cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t * convDesc))  \
    X(cudnnStatus_t, cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t convDesc))   \
    X(cudnnStatus_t, cudnnSetConvolution2dDescriptor,                                              \
      (cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v, int dilation_h,  \
       int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType))                  \
    X(cudnnStatus_t, cudnnSetConvolutionGroupCount,                                                \
      (cudnnConvolutionDescriptor_t convDesc, int groupCount))                                     \
    X(cudnnStatus_t, cudnnSetConvolutionMathType,                                                  \
      (cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType))                           \
    X(cudnnStatus_t, cudnnGetConvolution2dForwardOutputDim,                                        \
      (const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc, \
       const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w))                  \
    X(cudnnStatus_t, cudnnFindConvolutionForwardAlgorithm,                                         \
      (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,                                  \
       const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,           \
       const cudnnTensorDescriptor_t yDesc, const int requestedAlgoCount, int *returnedAlgoCount,  \
       cudnnConvolutionFwdAlgoPerf_t *perfResults))                                                \
    X(cudnnStatus_t, cudnnGetConvolutionForwardWorkspaceSize,                                      \
      (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,                                  \
       const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,           \
       const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes))  \
    X(cudnnStatus_t, cudnnConvolutionForward,                                                      \
      (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,               \
       const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,                          \
       const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,                \
       void *workSpace, size_t workSpaceSizeInBytes, const void *beta,                             \
       const cudnnTensorDescriptor_t yDesc, void *y))

#define G4_BASELINE_FIELD(ret, name, params) ret(*name) params;
typedef struct {
    G4_CUBLAS_FNS(G4_BASELINE_FIELD)
} g4_cublas_api;
typedef struct {
    G4_CUDNN_FNS(G4_BASELINE_FIELD)
} g4_cudnn_api;
#undef G4_BASELINE_FIELD

// The library's functions, loading it on the first call (once per process; thread-safe);
// NULL when it or one of the functions could not be loaded: then *why (when why is not NULL)
// is "not loaded: <the loader's message>". *from (when not NULL) is the name it was loaded by
// (the soname, or the configured directory's path), else "".
const g4_cublas_api *g4_cublas(const char **why, const char **from);
const g4_cudnn_api *g4_cudnn(const char **why, const char **from);

#ifdef __cplusplus
}
#endif

#endif
