// attn_layout_probe.cu - does the way attention decode's blocks read the KV
// cache limit them? (bench/NOTES.md, session 57: at attn.decode's shape the
// split kernel, a tensor-core kernel and the L2 prefetch all take ~19.5 us
// for 16.8 MB on an H100, DRAM a quarter busy.) Reads the same bytes of a
// {D 128, Hkv 8, L 4096} F16 K and V cache three ways, with no arithmetic
// but a sum that keeps the loads:
//   heads   a block per (range of R rows, kv head): a 256-byte piece of each
//           2 KB row, as the split and decode kernels read it
//   rows    a block per range of R / 8 rows, all kv heads: whole 2 KB rows
//   flat    the K and V buffers read front to back (a copy's read half)
// and prints us and GB/s per way, per launch of a CUDA graph of 32 (launch
// overhead amortized, as bench's us(graph)), cold (8 sets of the caches in
// turn, so each launch's bytes were evicted from the L2) and L2 warm, beside
// a device-to-device copy of the same bytes. Every block of each way is
// resident at once and issues its loads at its start, as the decode kernels'
// blocks do. Not part of the build:
//   nvcc -O3 -arch=sm_90 -o /tmp/probe scripts/attn_layout_probe.cu && /tmp/probe
// Run in session 58 on an H100 (bench/NOTES.md): each of the three read ways
// took the 16.8 MB cold in 6.8-7.1 us (2,360-2,480 GB/s; L2 warm 3.3-3.5 us;
// the D2D copy 11.1), the heads way as fast as whole rows and flat, while the
// split kernel takes ~18.7 us there.
// So the cache's layout does not limit attention decode; its chain does.
#include <algorithm>
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

constexpr int D = 128, HKV = 8, L = 4096, ROWB = D * 2;  // bytes of one (row, head) piece
constexpr int kThreads = 128;

// blocks (range r, head h): rows [r R, (r + 1) R) of head h; 16 threads per
// piece (16 bytes each), kThreads / 16 pieces at a time; the loads are written
// before any sum (how many the compiler keeps in flight is its choice)
template <int R> __global__ void read_heads(const char *k, const char *v, float *sink) {
    const int r = blockIdx.x, h = blockIdx.y, u = threadIdx.x % 16, p0 = threadIdx.x / 16;
    constexpr int PER = R / (kThreads / 16);
    uint4 x[2 * PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const long long row = (long long)r * R + p0 + i * (kThreads / 16);
        const long long off = (row * HKV + h) * ROWB + u * 16;
        x[2 * i] = __ldg((const uint4 *)(k + off));
        x[2 * i + 1] = __ldg((const uint4 *)(v + off));
    }
    unsigned s = 0;
#pragma unroll
    for (int i = 0; i < 2 * PER; i++) s += x[i].x ^ x[i].y ^ x[i].z ^ x[i].w;
    if (s == 0x12345678u) sink[threadIdx.x] = 1.0f;  // never, but the loads stay
}

// blocks over ranges of R / HKV rows, every head: the same bytes per block as read_heads
template <int R> __global__ void read_rows(const char *k, const char *v, float *sink) {
    const int r = blockIdx.x;
    constexpr int RR = R / HKV, UNITS = RR * HKV * ROWB / 16, PER = UNITS / kThreads;
    uint4 x[2 * PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const long long off = (long long)r * RR * HKV * ROWB + (long long)(threadIdx.x + i * kThreads) * 16;
        x[2 * i] = __ldg((const uint4 *)(k + off));
        x[2 * i + 1] = __ldg((const uint4 *)(v + off));
    }
    unsigned s = 0;
#pragma unroll
    for (int i = 0; i < 2 * PER; i++) s += x[i].x ^ x[i].y ^ x[i].z ^ x[i].w;
    if (s == 0x12345678u) sink[threadIdx.x] = 1.0f;
}

// the buffers front to back, grid-stride, 4 loads in flight per thread
__global__ void read_flat(const uint4 *k, const uint4 *v, long long n, float *sink) {
    unsigned s = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += 4LL * gridDim.x * blockDim.x) {
        uint4 a[4], b[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const long long t = i + (long long)j * gridDim.x * blockDim.x;
            a[j] = t < n ? __ldg(k + t) : make_uint4(0, 0, 0, 0);
            b[j] = t < n ? __ldg(v + t) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) s += a[j].x ^ a[j].y ^ b[j].z ^ b[j].w;
    }
    if (s == 0x12345678u) sink[threadIdx.x % 256] = 1.0f;
}

int main() {
    const size_t bytes = (size_t)L * HKV * ROWB;  // one of K, V
    // kSets copies of the caches (134 MB in all): a launch on set i % kSets
    // finds its bytes evicted from the L2 (50 MB on an H100) by the others,
    // without the dirty lines a memset would leave; "warm" reads set 0 only
    constexpr int kSets = 8, kReps = 32;
    char *k[kSets], *v[kSets], *c = nullptr;
    float *sink = nullptr;
    for (int i = 0; i < kSets; i++) {
        CK(cudaMalloc(&k[i], bytes));
        CK(cudaMalloc(&v[i], bytes));
        CK(cudaMemset(k[i], 1 + i, bytes));
        CK(cudaMemset(v[i], 2 + i, bytes));
    }
    CK(cudaMalloc(&c, 2 * bytes));
    CK(cudaMalloc(&sink, 256 * sizeof(float)));
    int dev = 0, sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs; K + V %.1f MB (D %d, %d kv heads, %d rows, F16); us per launch in a CUDA graph of %d\n",
           prop.name, sms, 2.0 * bytes / 1e6, D, HKV, L, kReps);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // us per launch: a graph of kReps launches (set i % kSets, or set 0 when
    // warm), replayed 20 times after 3 warm-up replays, the median replay
    auto run = [&](const char *name, bool warm, auto launch) -> int {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kReps; i++) launch(warm ? 0 : i % kSets);
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        std::vector<float> t;
        for (int r = 0; r < 23; r++) {
            CK(cudaEventRecord(a, st));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (r >= 3) t.push_back(ms * 1000.0f / kReps);
        }
        std::sort(t.begin(), t.end());
        const float us = t[t.size() / 2];
        printf("%-40s %-7s %8.2f us  %7.0f GB/s read\n", name, warm ? "L2 warm" : "cold", us, 2.0 * bytes / (us * 1e3));
        CK(cudaEventDestroy(a));
        CK(cudaEventDestroy(b));
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        return 0;
    };
    for (int warm = 0; warm < 2; warm++) {
        // the same 512 (or 256) blocks and bytes per block in the heads and rows ways
        if (run("heads: 64 rows x 1 kv head per block", warm, [&](int i) {
                read_heads<64><<<dim3(L / 64, HKV), kThreads, 0, st>>>(k[i], v[i], sink);
            }) ||
            run("heads: 128 rows x 1 kv head per block", warm, [&](int i) {
                read_heads<128><<<dim3(L / 128, HKV), kThreads, 0, st>>>(k[i], v[i], sink);
            }) ||
            run("rows: 8 rows x 8 kv heads per block", warm, [&](int i) {
                read_rows<64><<<L * HKV / 64, kThreads, 0, st>>>(k[i], v[i], sink);
            }) ||
            run("rows: 16 rows x 8 kv heads per block", warm, [&](int i) {
                read_rows<128><<<L * HKV / 128, kThreads, 0, st>>>(k[i], v[i], sink);
            }) ||
            run("flat", warm, [&](int i) {
                read_flat<<<4 * sms, 256, 0, st>>>((const uint4 *)k[i], (const uint4 *)v[i], (long long)(bytes / 16), sink);
            }) ||
            // a copy of K and V (its traffic is twice the bytes read counted here)
            run("copy D2D of K and V (reads + writes)", warm, [&](int i) {
                cudaMemcpyAsync(c, k[i], bytes, cudaMemcpyDeviceToDevice, st);
                cudaMemcpyAsync(c + bytes, v[i], bytes, cudaMemcpyDeviceToDevice, st);
            }))
            return 1;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return 0;
}
