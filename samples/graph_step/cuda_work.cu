// graph_step's kernels on CUDA (step_work.hpp), and the same steps captured
// with cudaMallocAsync: what CUDA's graph memory nodes reserve for them.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "step_work.hpp"

namespace graph_step {

namespace {

constexpr int kBlocks = 264;
constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void layer_kernel(const std::uint32_t* src, std::size_t src_words, std::uint32_t* dst,
                             std::size_t dst_words, std::uint32_t key) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < dst_words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = word(src[i % src_words] ^ key, static_cast<std::uint32_t>(i));
}

// One thread per gradient word: a sum in wrapping integer arithmetic, exact
// in any order.
__global__ void accumulate_kernel(const std::uint32_t* src, std::size_t words, std::uint32_t* acc,
                                  std::size_t acc_words) {
  for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < acc_words;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t sum = 0;
    for (std::size_t i = j; i < words; i += acc_words) sum += src[i];
    acc[j] += sum;
  }
}

cudaStream_t to_stream(memlake::Stream s) {
  return static_cast<cudaStream_t>(s);
}

class CudaWork final : public Work {
 public:
  void layer(memlake::Stream s, const std::uint32_t* src, std::size_t src_words, std::uint32_t* dst,
             std::size_t dst_words, std::uint32_t key) override {
    layer_kernel<<<kBlocks, kThreads, 0, to_stream(s)>>>(src, src_words, dst, dst_words, key);
    check(cudaGetLastError(), "layer kernel");
  }
  void accumulate(memlake::Stream s, const std::uint32_t* src, std::size_t words,
                  std::uint32_t* acc, std::size_t acc_words) override {
    accumulate_kernel<<<kBlocks, kThreads, 0, to_stream(s)>>>(src, words, acc, acc_words);
    check(cudaGetLastError(), "accumulate kernel");
  }
  void read(const void* p, void* out, std::size_t bytes) override {
    check(cudaMemcpy(out, p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
};

}  // namespace

std::unique_ptr<Work> cuda_work() {
  return std::make_unique<CudaWork>();
}

std::size_t graph_memory_nodes_reserved(const std::vector<std::size_t>& tokens,
                                        std::size_t hidden) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaDeviceGraphMemTrim(0), "cudaDeviceGraphMemTrim");
  std::uint32_t* grad = nullptr;
  check(cudaMalloc(&grad, hidden * 4), "cudaMalloc");
  std::vector<cudaGraphExec_t> execs;
  std::vector<std::uint32_t*> inputs;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::size_t n = tokens[k] * hidden;
    std::uint32_t* x = nullptr;
    check(cudaMalloc(&x, n * 4), "cudaMalloc");
    inputs.push_back(x);
    const auto key = static_cast<std::uint32_t>(3 * k + 1);
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    void *h = nullptr, *a = nullptr, *o = nullptr;
    check(cudaMallocAsync(&h, 4 * n * 4, s), "cudaMallocAsync");
    layer_kernel<<<kBlocks, kThreads, 0, s>>>(x, n, static_cast<std::uint32_t*>(h), 4 * n, key);
    check(cudaMallocAsync(&a, n * 4, s), "cudaMallocAsync");
    layer_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<std::uint32_t*>(h), 4 * n,
                                              static_cast<std::uint32_t*>(a), n, key + 1);
    check(cudaFreeAsync(h, s), "cudaFreeAsync");
    check(cudaMallocAsync(&o, n * 4, s), "cudaMallocAsync");
    layer_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<std::uint32_t*>(a), n,
                                              static_cast<std::uint32_t*>(o), n, key + 2);
    check(cudaFreeAsync(a, s), "cudaFreeAsync");
    accumulate_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<std::uint32_t*>(o), n, grad, hidden);
    check(cudaFreeAsync(o, s), "cudaFreeAsync");
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    execs.push_back(exec);
  }
  for (cudaGraphExec_t e : execs) check(cudaGraphLaunch(e, s), "cudaGraphLaunch");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::uint64_t reserved = 0;
  check(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &reserved),
        "cudaDeviceGetGraphMemAttribute");
  for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
  for (std::uint32_t* x : inputs) cudaFree(x);
  cudaFree(grad);
  cudaStreamDestroy(s);
  cudaDeviceGraphMemTrim(0);
  return static_cast<std::size_t>(reserved);
}

}  // namespace graph_step
