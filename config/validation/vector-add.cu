// vectorAdd for `make gpu-validate`: c = a + b on the GPU, every element checked on the host.
// Prints "Test PASSED" like NVIDIA's sample, so cuda-smoke.sh judges both the same way.
// VECTOR_ADD_REPEAT=k runs the kernel k times (a longer hold on a shared GPU).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ void add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static bool ok(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  std::printf("Test FAILED\n");
  return false;
}

int main() {
  const int n = 1 << 24;
  const char *env = std::getenv("VECTOR_ADD_REPEAT");
  const int repeat = env ? std::atoi(env) : 1;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = static_cast<float>(i % 777);
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (!ok(cudaGetDevice(&device), "cudaGetDevice") || !ok(cudaGetDeviceProperties(&prop, device), "properties")) return 1;

  float *da = nullptr, *db = nullptr, *dc = nullptr;
  const size_t bytes = sizeof(float) * n;
  if (!ok(cudaMalloc(&da, bytes), "cudaMalloc a") || !ok(cudaMalloc(&db, bytes), "cudaMalloc b") ||
      !ok(cudaMalloc(&dc, bytes), "cudaMalloc c"))
    return 1;
  if (!ok(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "copy a") ||
      !ok(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "copy b"))
    return 1;
  const int threads = 256, blocks = (n + threads - 1) / threads;
  for (int r = 0; r < (repeat > 0 ? repeat : 1); ++r) add<<<blocks, threads>>>(da, db, dc, n);
  if (!ok(cudaGetLastError(), "launch") || !ok(cudaDeviceSynchronize(), "kernel")) return 1;
  if (!ok(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost), "copy c")) return 1;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  for (int i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i]) {
      std::printf("element %d: %f != %f\nTest FAILED\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }
  std::printf("vectorAdd of %d elements x %d on %s (sm_%d%d)\nTest PASSED\n", n, repeat, prop.name, prop.major, prop.minor);
  return 0;
}
