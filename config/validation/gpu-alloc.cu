// gpu-alloc MIB HOLD_SECONDS: cudaMalloc MIB MiB on GPU 0 and keep it for HOLD_SECONDS; prints
// "allocated MIB MiB" or "cudaMalloc MIB MiB failed: <error>" (exit status 2), for the memory
// part of `make gpu-sharing-bench` (one sharer taking more than its share of a shared GPU).
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpu-alloc MIB HOLD_SECONDS\n");
    return 1;
  }
  const size_t mib = std::strtoull(argv[1], nullptr, 10);
  const unsigned hold = std::atoi(argv[2]);
  size_t free_bytes = 0, total = 0;
  cudaError_t err = cudaMemGetInfo(&free_bytes, &total);
  if (err != cudaSuccess) {
    std::printf("cudaMemGetInfo failed: %s\n", cudaGetErrorString(err));
    return 2;
  }
  void *p = nullptr;
  err = cudaMalloc(&p, mib << 20);
  if (err != cudaSuccess) {
    std::printf("cudaMalloc %zu MiB failed: %s (free %zu of %zu MiB)\n", mib, cudaGetErrorString(err), free_bytes >> 20, total >> 20);
    return 2;
  }
  err = cudaMemset(p, 1, mib << 20);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("writing %zu MiB failed: %s\n", mib, cudaGetErrorString(err));
    return 2;
  }
  std::printf("allocated %zu MiB (free before: %zu of %zu MiB)\n", mib, free_bytes >> 20, total >> 20);
  std::fflush(stdout);
  sleep(hold);
  cudaFree(p);
  return 0;
}
