// n-body for `make gpu-sharing-bench`: the command line and the benchmark lines of NVIDIA's nbody
// sample (-benchmark -numbodies=N -i=ITERATIONS; "N bodies, total time for I iterations: T ms"),
// so sharing-bench.sh drives and parses both the same way. All-pairs gravity in fp32, one thread
// per body, tiles of 256 bodies through shared memory; one untimed step first, then I timed steps
// between two CUDA events (the time includes waiting for other processes on a shared GPU).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

constexpr int TILE = 256;

__global__ void step(const float4 *pos, float4 *next, float4 *vel, int n, float dt) {
  __shared__ float4 tile[TILE];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 me = i < n ? pos[i] : make_float4(0, 0, 0, 0);
  float ax = 0, ay = 0, az = 0;
  for (int base = 0; base < n; base += TILE) {
    const int j = base + threadIdx.x;
    tile[threadIdx.x] = j < n ? pos[j] : make_float4(0, 0, 0, 0);
    __syncthreads();
    for (int k = 0; k < TILE; ++k) {
      const float dx = tile[k].x - me.x, dy = tile[k].y - me.y, dz = tile[k].z - me.z;
      const float inv = rsqrtf(dx * dx + dy * dy + dz * dz + 1e-4f);
      const float s = tile[k].w * inv * inv * inv;
      ax += dx * s; ay += dy * s; az += dz * s;
    }
    __syncthreads();
  }
  if (i >= n) return;
  float4 v = vel[i];
  v.x += ax * dt; v.y += ay * dt; v.z += az * dt;
  vel[i] = v;
  next[i] = make_float4(me.x + v.x * dt, me.y + v.y * dt, me.z + v.z * dt, me.w);
}

static int flag(int argc, char **argv, const char *name, int fallback) {
  const size_t len = std::strlen(name);
  for (int a = 1; a < argc; ++a) {
    const char *arg = argv[a];
    while (*arg == '-') ++arg;
    if (std::strncmp(arg, name, len) == 0 && arg[len] == '=') return std::atoi(arg + len + 1);
  }
  return fallback;
}

static void check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

int main(int argc, char **argv) {
  int n = flag(argc, argv, "numbodies", 4096);
  const int iterations = flag(argc, argv, "i", 10);
  if (n < 1 || iterations < 1) {
    std::fprintf(stderr, "-numbodies and -i must be at least 1\n");
    return 1;
  }
  n = (n + TILE - 1) / TILE * TILE;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("> Compute %d.%d CUDA device: [%s]\n", prop.major, prop.minor, prop.name);
  std::vector<float4> host(n);
  unsigned seed = 12345;
  for (auto &p : host) {
    auto r = [&seed] { seed = seed * 1664525u + 1013904223u; return (seed >> 8) / 16777216.0f - 0.5f; };
    p = make_float4(r(), r(), r(), 1.0f / n);
  }
  float4 *pos[2] = {nullptr, nullptr}, *vel = nullptr;
  const size_t bytes = sizeof(float4) * n;
  check(cudaMalloc(&pos[0], bytes), "cudaMalloc");
  check(cudaMalloc(&pos[1], bytes), "cudaMalloc");
  check(cudaMalloc(&vel, bytes), "cudaMalloc");
  check(cudaMemcpy(pos[0], host.data(), bytes, cudaMemcpyHostToDevice), "copy");
  check(cudaMemset(vel, 0, bytes), "memset");
  const int blocks = n / TILE;
  step<<<blocks, TILE>>>(pos[0], pos[1], vel, n, 0.001f);
  check(cudaDeviceSynchronize(), "warm-up step");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start), "record");
  for (int it = 0; it < iterations; ++it) step<<<blocks, TILE>>>(pos[it & 1], pos[(it + 1) & 1], vel, n, 0.001f);
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "steps");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  const double interactions = double(n) * n * iterations / (ms / 1000.0) / 1e9;
  std::printf("%d bodies, total time for %d iterations: %.3f ms\n", n, iterations, ms);
  std::printf("= %.3f billion interactions per second\n", interactions);
  std::printf("= %.3f single-precision GFLOP/s at 20 flops per interaction\n", interactions * 20);
  return 0;
}
