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
// and prints us and GB/s per way (median of 50 launches, events; L2 warm, and
// cold after a 256 MB memset), beside a device-to-device copy of the same
// bytes. Not part of the build, not run yet (written in session 57 when the
// device time had run out):
//   nvcc -O3 -arch=sm_90 -o /tmp/probe scripts/attn_layout_probe.cu && /tmp/probe
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
// piece (16 bytes each), kThreads / 16 pieces at a time, all loads issued
// before any is summed
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
    if (s == 0x12345678u) sink[threadIdx.x] = 1.0f;
}

int main() {
    const size_t bytes = (size_t)L * HKV * ROWB;  // one of K, V
    char *k = nullptr, *v = nullptr, *c = nullptr;
    float *sink = nullptr;
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMalloc(&c, 2 * bytes));
    CK(cudaMalloc(&sink, kThreads * sizeof(float)));
    CK(cudaMemset(k, 1, bytes));
    CK(cudaMemset(v, 2, bytes));
    // the caches (16.8 MB) fit the L2 (50 MB on an H100): for the cold runs a
    // 256 MB memset before each timed launch evicts them
    char *flush = nullptr;
    const size_t fbytes = 256u << 20;
    CK(cudaMalloc(&flush, fbytes));
    int dev = 0, sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs; K + V %.1f MB (D %d, %d kv heads, %d rows, F16)\n", prop.name, sms, 2.0 * bytes / 1e6, D,
           HKV, L);
    auto report = [&](const char *name, float us) {
        printf("%-34s %8.2f us  %7.0f GB/s\n", name, us, 2.0 * bytes / (us * 1e3));
    };
    // each way twice: L2 warm (the buffers were just read) and cold (flush first, timed apart)
    for (int cold = 0; cold < 2; cold++) {
        auto run = [&](const char *name, auto launch) {
            cudaEvent_t a, b;
            cudaEventCreate(&a), cudaEventCreate(&b);
            std::vector<float> t;
            for (int i = 0; i < 55; i++) {
                if (cold) cudaMemsetAsync(flush, i, fbytes);
                cudaEventRecord(a);
                launch();
                cudaEventRecord(b);
                cudaEventSynchronize(b);
                float ms = 0;
                cudaEventElapsedTime(&ms, a, b);
                if (i >= 5) t.push_back(ms * 1000.0f);
            }
            std::sort(t.begin(), t.end());
            cudaEventDestroy(a), cudaEventDestroy(b);
            char label[64];
            snprintf(label, sizeof label, "%s (%s)", name, cold ? "L2 cold" : "L2 warm");
            report(label, t[t.size() / 2]);
        };
        // the same 512 (or 256) blocks and bytes per block each way
        run("heads, 64 rows x 1 head / block", [&] { read_heads<64><<<dim3(L / 64, HKV), kThreads>>>(k, v, sink); });
        run("heads, 128 rows x 1 head / block", [&] { read_heads<128><<<dim3(L / 128, HKV), kThreads>>>(k, v, sink); });
        run("rows, 8 rows x 8 heads / block", [&] { read_rows<64><<<L * HKV / 64, kThreads>>>(k, v, sink); });
        run("rows, 16 rows x 8 heads / block", [&] { read_rows<128><<<L * HKV / 128, kThreads>>>(k, v, sink); });
        run("flat", [&] { read_flat<<<4 * sms, 256>>>((const uint4 *)k, (const uint4 *)v, (long long)(bytes / 16), sink); });
        // GB/s of a copy here counts the bytes read, as the rows above (its traffic is twice that)
        run("copy D2D of K and V", [&] {
            cudaMemcpyAsync(c, k, bytes, cudaMemcpyDeviceToDevice);
            cudaMemcpyAsync(c + bytes, v, bytes, cudaMemcpyDeviceToDevice);
        });
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return 0;
}
