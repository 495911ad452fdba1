// One ggml op timed alone, for bench/probes/opspeed.py: flash attention or a weight product, LAYERS copies of it
// in one graph (each with its own tensors, so caches start cold as in a model), CPU time and wall per pass.
//   opspeed fa N_KV ROWS STREAMS THREADS ITERS LAYERS   flash attention: 9 query heads, 3 K/V heads of 64, F16 cells
//   opspeed mm TYPE K M ROWS THREADS ITERS LAYERS       an M x K weight of TYPE (q4_K, q6_K, f16, ...) times ROWS rows
#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

static double now(clockid_t clock) {
    timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float noise() { return rand() / (float) RAND_MAX - 0.5f; }

static ggml_tensor * attention(ggml_context * ctx, int n_kv, int rows, int streams) {
    const int DK = 64, H = 9, HKV = 3;
    ggml_tensor * q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, DK, rows, H, streams);
    // K and V cells as llama.cpp's cache holds them: a cell's heads side by side in one row
    ggml_tensor * kc = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK * HKV, n_kv, streams);
    ggml_tensor * vc = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK * HKV, n_kv, streams);
    ggml_tensor * k = ggml_view_4d(ctx, kc, DK, n_kv, HKV, streams, kc->nb[1], DK * 2, kc->nb[2], 0);
    ggml_tensor * v = ggml_view_4d(ctx, vc, DK, n_kv, HKV, streams, vc->nb[1], DK * 2, vc->nb[2], 0);
    ggml_tensor * mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n_kv, rows, 1, streams);
    for (int64_t i = 0; i < ggml_nelements(q); i++) ((float *) q->data)[i] = noise();
    for (int64_t i = 0; i < ggml_nelements(kc); i++) ((ggml_fp16_t *) kc->data)[i] = ggml_fp32_to_fp16(noise());
    for (int64_t i = 0; i < ggml_nelements(vc); i++) ((ggml_fp16_t *) vc->data)[i] = ggml_fp32_to_fp16(noise());
    for (int64_t i = 0; i < ggml_nelements(mask); i++) {  // causal: the rows are the last ones of the cells
        const int64_t cell = i % n_kv, row = (i / n_kv) % rows;
        ((ggml_fp16_t *) mask->data)[i] = ggml_fp32_to_fp16(cell <= n_kv - rows + row ? 0.0f : -INFINITY);
    }
    return ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / sqrtf((float) DK), 0.0f, 0.0f);
}

static ggml_tensor * product(ggml_context * ctx, ggml_type type, int K, int M, ggml_tensor * rows) {
    std::vector<float> values((size_t) K * M);
    for (float & x : values) x = noise();
    ggml_tensor * w = ggml_new_tensor_2d(ctx, type, K, M);
    ggml_quantize_chunk(type, values.data(), w->data, 0, M, K, nullptr);
    return ggml_mul_mat(ctx, w, rows);
}

int main(int argc, char ** argv) {
    const bool fa = argc > 1 && strcmp(argv[1], "fa") == 0;
    if (argc != (fa ? 8 : 9)) {  // fa takes one argument less than mm
        fprintf(stderr, "usage: opspeed fa N_KV ROWS STREAMS THREADS ITERS LAYERS | mm TYPE K M ROWS THREADS ITERS LAYERS\n");
        return 2;
    }
    const int threads = atoi(argv[argc - 3]), iters = atoi(argv[argc - 2]), layers = atoi(argv[argc - 1]);
    ggml_init_params params = { (size_t) 6 << 30, nullptr, false };
    ggml_context * ctx = ggml_init(params);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    srand(1);
    ggml_tensor * rows = nullptr;
    ggml_type type = GGML_TYPE_COUNT;
    if (!fa) {
        for (int t = 0; t < GGML_TYPE_COUNT; t++) {
            const char * name = ggml_type_name((ggml_type) t);
            if (name && strcmp(name, argv[2]) == 0) type = (ggml_type) t;
        }
        if (type == GGML_TYPE_COUNT) { fprintf(stderr, "unknown type %s\n", argv[2]); return 2; }
        rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, atoi(argv[3]), atoi(argv[5]));
        for (int64_t i = 0; i < ggml_nelements(rows); i++) ((float *) rows->data)[i] = noise();
    }
    ggml_tensor * first = nullptr;
    for (int layer = 0; layer < layers; layer++) {
        ggml_tensor * out = fa ? attention(ctx, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]))
                               : product(ctx, type, atoi(argv[3]), atoi(argv[4]), rows);
        ggml_build_forward_expand(graph, out);
        first = first ? first : out;
    }
    ggml_graph_compute_with_ctx(ctx, graph, threads);  // warm up: threads, work buffer
    const double cpu = now(CLOCK_PROCESS_CPUTIME_ID), wall = now(CLOCK_MONOTONIC);
    for (int i = 0; i < iters; i++) ggml_graph_compute_with_ctx(ctx, graph, threads);
    const double cpu_us = (now(CLOCK_PROCESS_CPUTIME_ID) - cpu) / iters * 1e6;
    const double wall_us = (now(CLOCK_MONOTONIC) - wall) / iters * 1e6;
    double sum = 0;
    for (int64_t i = 0; i < ggml_nelements(first); i++) sum += ((float *) first->data)[i];
    printf("%.1f %.1f %.9g\n", cpu_us, wall_us, sum);
    ggml_free(ctx);
    return 0;
}
