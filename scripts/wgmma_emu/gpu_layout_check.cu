// gpu_layout_check.cu - the self-test's tile placement and descriptors (selftest.cpp: place(), desc())
// run on a real sm_90a GPU: BF16 m64nNk16 wgmma with K-major and MN-major operands, against a float64
// matmul on the host (values k/8: exact). Settles on hardware the layout facts the emulator takes from
// the PTX ISA (README.md, "16-bit wgmma"). Not part of any make target:
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -o gpu_layout_check scripts/wgmma_emu/gpu_layout_check.cu
//   ./gpu_layout_check
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>

// (as selftest.cpp)
static size_t place(int major_mn, uint32_t base, int mn, int kt, int r, int c) {
    if (!major_mn) return base + (size_t)(c / 64) * mn * 128 + (size_t)r * 128 + ((((c % 64) / 8) ^ (r % 8)) << 4) + (c % 8) * 2;
    return base + (size_t)(r / 64) * kt * 128 + (size_t)c * 128 + ((((r % 64) / 8) ^ (c % 8)) << 4) + (r % 8) * 2;
}
__host__ __device__ static uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

#define O8(d, o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define O16(d, o) O8(d, o), O8(d, o + 8)
#define O32(d, o) O16(d, o), O16(d, o + 16)
template <int N, int TA, int TB> __device__ void mma(float *d, uint64_t da, uint64_t db) {
    if constexpr (N == 32)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %18, %19;\n}\n"
                     : O16(d, 0) : "l"(da), "l"(db), "n"(TA), "n"(TB));
    else if constexpr (N == 64)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
                     " %32, %33, p, 1, 1, %34, %35;\n}\n"
                     : O32(d, 0) : "l"(da), "l"(db), "n"(TA), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                     "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
                     " %64, %65, p, 1, 1, %66, %67;\n}\n"
                     : O32(d, 0), O32(d, 32) : "l"(da), "l"(db), "n"(TA), "n"(TB));
}

// one warpgroup: copy the tiles' image into 1024-aligned shared memory, then the k16 steps
template <int N, int TA, int TB>
__global__ void kern(const unsigned char *img, int bytes, int kt, uint32_t oB, uint32_t bstart, uint32_t blbo, float *out) {
    extern __shared__ __align__(1024) unsigned char smraw[];
    unsigned char *sm = smraw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smraw) & 1023)) & 1023);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) sm[i] = img[i];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
    for (int s = 0; s < kt / 16; s++) {
        const uint32_t a = TA ? sb + 2048 * s : sb + (s / 4) * 64 * 128 + (s % 4) * 32;
        const uint32_t b = TB ? sb + oB + bstart + 2048 * s : sb + oB + (s / 4) * N * 128 + (s % 4) * 32;
        const uint64_t da = desc(a, TA ? 0 : 16, 1024), db = desc(b, TB ? blbo : 16, 1024);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        mma<N, TA, TB>(d, da, db);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    const int t = threadIdx.x, wq = t >> 5, lane = t & 31;
    for (int i = 0; i < N / 2; i++) {
        const int row = 16 * wq + (lane >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        out[row * N + col] = d[i];
    }
}

template <int N, int TA, int TB> int run(const char *name, int kt, int bcol0, int bw) {
    std::mt19937 rng(77 + N + kt + bcol0);
    auto val = [&]() { return (float)((int)(rng() % 17) - 8) / 8.0f; };
    std::vector<float> A(64 * kt), B(N * kt);
    for (auto &x : A) x = val();
    for (auto &x : B) x = val();
    const uint32_t oB = 32768;
    std::vector<unsigned char> img(65536, 0);
    auto put = [&](size_t off, float x) {
        const __nv_bfloat16 h = __float2bfloat16(x);
        memcpy(&img[off], &h, 2);
    };
    const int bwid = TB ? bw : N;
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < kt; k++) put(place(TA, 0, 64, kt, m, k), A[m * kt + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < kt; k++) put(place(TB, oB, bwid, kt, n + (TB ? bcol0 : 0), k), B[n * kt + k]);
    unsigned char *dimg;
    float *dout;
    cudaMalloc(&dimg, img.size());
    cudaMalloc(&dout, 64 * N * 4);
    cudaMemcpy(dimg, img.data(), img.size(), cudaMemcpyHostToDevice);
    const int smem = 65536 + 1024;
    cudaFuncSetAttribute(kern<N, TA, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    // MN-major B: LBO = the 64-column blocks' stride (kt rows of 128 bytes), SBO = 1024 (8 k rows)
    kern<N, TA, TB><<<1, 128, smem>>>(dimg, (int)img.size(), kt, oB, 2 * bcol0, kt * 128, dout);
    std::vector<float> out(64 * N);
    const cudaError_t e = cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(dimg), cudaFree(dout);
    int bad = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < kt; k++) s += (double)A[m * kt + k] * B[n * kt + k];
            bad += out[m * N + n] != (float)s;
        }
    printf("%-60s %s (%d of %d elements differ)%s%s\n", name, bad || e ? "FAIL" : "OK", bad, 64 * N, e ? " " : "",
           e ? cudaGetErrorString(e) : "");
    return bad || e;
}

int main() {
    int f = 0;
    f += run<64, 0, 0>("m64n64k16 A K, B K, k 128 (two 64-column blocks)", 128, 0, 0);
    f += run<64, 1, 1>("m64n64k16 A MN, B MN, k 64 (2048 bytes a k16 step)", 64, 0, 64);
    f += run<32, 0, 1>("m64n32k16 A K, B MN 64 bytes into its rows (cols 32..63)", 64, 32, 64);
    f += run<32, 1, 0>("m64n32k16 A MN, B K, k 128", 128, 0, 0);
    f += run<128, 1, 1>("m64n128k16 A MN, B MN: 2 column blocks LBO apart, SBO 1024", 64, 0, 128);
    printf("gpu_layout_check: %s\n", f ? "FAILURES" : "all OK");
    return f ? 1 : 0;
}
