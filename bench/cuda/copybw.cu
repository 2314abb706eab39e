/* copybw.cu — the HBM bound of docs/bench.md's H200 table: device-to-device copy bandwidth,
 * counting bytes read plus bytes written (as METHOD.md asks), median of 20 copies of 4 GiB. */
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

int main() {
    const size_t n = (size_t)4 << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) { printf("copybw: no memory\n"); return 1; }
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 23; i++) {
        cudaEventRecord(e0);
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    printf("copy bandwidth: %.3f TB/s (read + write, median of 20 x 4 GiB)\n", 2.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e12);
    return 0;
}
