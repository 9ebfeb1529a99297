/* normedu's CPU kernels: LayerNorm and RMSNorm over the last axis of a float32 (n, d)
 * matrix, forward (normedu_norm_fwd) and backward (normedu_norm_bwd). Built at first use by
 * normedu/cpu_kernels.py:
 *     cc -O3 -march=native -fopenmp -shared -fPIC norm_kernels.c
 *
 * Forward, per row (rows are split over OpenMP threads):
 *   1. sum the row            -> mean   (row read from memory; it now sits in L1/L2)
 *   2. sum (x - mean)^2       -> rstd   (row read again, from cache: the two-pass variance
 *                                         costs arithmetic, not memory traffic)
 *   3. y = (x - mean) * rstd * w + b    (row read from cache, y written once)
 * so memory sees one read of x and one write of y: the 2 * n * d * 4 bytes of the roofline.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* Independent partial sums. One accumulator would make every add wait for the previous one
 * (about 4 cycles each); 64 lanes give the compiler several vector registers to add into at
 * once, so a pass over a cached row runs at load speed. */
#define LANES 64

static float row_sum(const float *restrict x, long d)
{
    float acc[LANES] = {0};
    long j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += x[j + k];
    float s = 0.0f;
    for (; j < d; j++)
        s += x[j];
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

static float row_sum_sq(const float *restrict x, long d, float shift)
{
    float acc[LANES] = {0};
    long j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int k = 0; k < LANES; k++) {
            float v = x[j + k] - shift;
            acc[k] += v * v;
        }
    float s = 0.0f;
    for (; j < d; j++) {
        float v = x[j] - shift;
        s += v * v;
    }
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

/* y = (x - mean) * rstd * w (+ b). With `stream`, full vectors go out as non-temporal stores:
 * they skip the read-for-ownership that an ordinary store of a cache line not in cache costs
 * (a hidden extra read of y) and do not evict x's next rows from the cache. */
static void row_write(const float *restrict x, const float *restrict w,
                      const float *restrict b, float *restrict y, long d, float mean, float rstd,
                      int stream)
{
    long j = 0;
#if defined(__AVX512F__)
    if (stream && (uintptr_t)y % 64 == 0) {
        __m512 m = _mm512_set1_ps(mean), r = _mm512_set1_ps(rstd);
        for (; j + 16 <= d; j += 16) {
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), m), r);
            v = _mm512_mul_ps(v, _mm512_loadu_ps(w + j));
            if (b)
                v = _mm512_add_ps(v, _mm512_loadu_ps(b + j));
            _mm512_stream_ps(y + j, v);
        }
    }
#elif defined(__AVX__)
    if (stream && (uintptr_t)y % 32 == 0) {
        __m256 m = _mm256_set1_ps(mean), r = _mm256_set1_ps(rstd);
        for (; j + 8 <= d; j += 8) {
            __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), r);
            v = _mm256_mul_ps(v, _mm256_loadu_ps(w + j));
            if (b)
                v = _mm256_add_ps(v, _mm256_loadu_ps(b + j));
            _mm256_stream_ps(y + j, v);
        }
    }
#endif
    for (; j < d; j++) {
        float v = (x[j] - mean) * rstd * w[j];
        y[j] = b ? v + b[j] : v;
    }
}

/* center = 1: LayerNorm (b may be NULL); center = 0: RMSNorm (b ignored). mean_out and
 * rstd_out (n values each) may be NULL; if given, they receive the row statistics that the
 * backward can reuse instead of recomputing them. */
void normedu_norm_fwd(const float *x, const float *w, const float *b, float *y, long n, long d,
                     float eps, int center, int stream, int threads, float *mean_out,
                     float *rstd_out)
{
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (long i = 0; i < n; i++) {
            const float *xr = x + i * d;
            float mean = center ? row_sum(xr, d) / (float)d : 0.0f;
            float rstd = 1.0f / sqrtf(row_sum_sq(xr, d, mean) / (float)d + eps);
            row_write(xr, w, center ? b : 0, y + i * d, d, mean, rstd, stream);
            if (mean_out)
                mean_out[i] = mean;
            if (rstd_out)
                rstd_out[i] = rstd;
        }
#if defined(__AVX512F__) || defined(__AVX__)
        /* Streaming stores are weakly ordered: each thread fences its own before the team
         * joins, so Python never reads a y that is still in a write-combining buffer. */
        if (stream)
            _mm_sfence();
#endif
    }
}

/* sum(g) and sum(g * (x - mean)) over a row, g = dy * w, with LANES partial sums. */
static void row_grad_sums(const float *restrict x, const float *restrict dy,
                          const float *restrict w, long d, float mean, float *sg, float *sgx)
{
    float a[LANES] = {0}, b[LANES] = {0};
    long j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int k = 0; k < LANES; k++) {
            float g = dy[j + k] * w[j + k];
            a[k] += g;
            b[k] += g * (x[j + k] - mean);
        }
    float s0 = 0.0f, s1 = 0.0f;
    for (; j < d; j++) {
        float g = dy[j] * w[j];
        s0 += g;
        s1 += g * (x[j] - mean);
    }
    for (int k = 0; k < LANES; k++) {
        s0 += a[k];
        s1 += b[k];
    }
    *sg = s0;
    *sgx = s1;
}

/* Backward. Per row, with g = dy * w, x_hat = (x - mean) * rstd and bars for row means:
 *   LayerNorm: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))
 *   RMSNorm:   dx = rstd * (g - x_hat * mean(g * x_hat))            (mean = 0)
 * and over rows dw = sum(dy * x_hat), db = sum(dy). The row statistics come from the forward
 * (mean_in, rstd_in; mean_in unused for RMSNorm) or, if rstd_in is NULL, are recomputed from x.
 * Memory sees one read of x, one of dy and one write of dx. The
 * column sums go into per-thread rows of d values that stay in cache (float32 for blocks of
 * BLOCK_ROWS rows, then float64), added up at the end: a column sum over thousands of rows
 * keeps float32 accuracy.
 * Returns 0, or -1 if the per-thread buffers could not be allocated. */
/* Rows added in float32 before they go into the float64 column sums: a float64 add of every
 * element costs as much as the rest of the backward, and 32 float32 terms lose nothing that
 * matters. */
#define BLOCK_ROWS 32

static void flush(double *restrict acc, float *restrict blk, long d)
{
    for (long j = 0; j < d; j++) {
        acc[j] += blk[j];
        blk[j] = 0.0f;
    }
}

/* dx of one row, and its dy * x_hat and dy added into the block sums bw, bb. */
static void row_dx(const float *restrict x, const float *restrict dy, const float *restrict w,
                   float *restrict dx, float *restrict bw, float *restrict bb, long d,
                   float mean, float rstd, float mg, float mgx)
{
    for (long j = 0; j < d; j++) {
        float xh = (x[j] - mean) * rstd;
        dx[j] = rstd * (dy[j] * w[j] - mg - xh * mgx);
        bw[j] += dy[j] * xh;
        bb[j] += dy[j];
    }
}

int normedu_norm_bwd(const float *restrict dy, const float *restrict x,
                     const float *restrict w, float *restrict dx, float *restrict dw,
                     float *restrict db, long n, long d, float eps, int center, int threads,
                     const float *mean_in, const float *rstd_in)
{
    double *acc = calloc((size_t)threads * 2 * d, sizeof(double));
    float *blk = calloc((size_t)threads * 2 * d, sizeof(float));
    if (!acc || !blk) {
        free(acc);
        free(blk);
        return -1;
    }
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#pragma omp single
        used = omp_get_num_threads();
#endif
        double *restrict aw = acc + (size_t)t * 2 * d, *restrict ab = aw + d;
        float *restrict bw = blk + (size_t)t * 2 * d, *restrict bb = bw + d;
        int rows = 0;
#pragma omp for schedule(static)
        for (long i = 0; i < n; i++) {
            const float *restrict xr = x + i * d, *restrict gr = dy + i * d;
            float mean, rstd;
            if (rstd_in) { /* saved by the forward: two passes over the row fewer */
                mean = center ? mean_in[i] : 0.0f;
                rstd = rstd_in[i];
            } else {
                mean = center ? row_sum(xr, d) / (float)d : 0.0f;
                rstd = 1.0f / sqrtf(row_sum_sq(xr, d, mean) / (float)d + eps);
            }
            float sg, sgx;
            row_grad_sums(xr, gr, w, d, mean, &sg, &sgx);
            float mg = center ? sg / (float)d : 0.0f, mgx = sgx * rstd / (float)d;
            row_dx(xr, gr, w, dx + i * d, bw, bb, d, mean, rstd, mg, mgx);
            if (++rows == BLOCK_ROWS) {
                flush(aw, bw, d);
                flush(ab, bb, d);
                rows = 0;
            }
        }
        flush(aw, bw, d);
        flush(ab, bb, d);
    }
    for (long j = 0; j < d; j++) {
        double sw = 0.0, sb = 0.0;
        for (int t = 0; t < used; t++) {
            sw += acc[(size_t)t * 2 * d + j];
            sb += acc[(size_t)t * 2 * d + d + j];
        }
        dw[j] = (float)sw;
        if (db)
            db[j] = (float)sb;
    }
    free(acc);
    free(blk);
    return 0;
}
