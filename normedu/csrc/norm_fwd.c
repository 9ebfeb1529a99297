/* normedu's CPU forward kernels: LayerNorm and RMSNorm over the last axis of a float32
 * (n, d) matrix. Built at first use by normedu/cpu_kernels.py:
 *     cc -O3 -march=native -fopenmp -shared -fPIC norm_fwd.c
 *
 * Per row (rows are split over OpenMP threads):
 *   1. sum the row            -> mean   (row read from memory; it now sits in L1/L2)
 *   2. sum (x - mean)^2       -> rstd   (row read again, from cache: the two-pass variance
 *                                         costs arithmetic, not memory traffic)
 *   3. y = (x - mean) * rstd * w + b    (row read from cache, y written once)
 * so memory sees one read of x and one write of y: the 2 * n * d * 4 bytes of the roofline.
 */
#include <math.h>
#include <stdint.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* Independent partial sums. One accumulator would make every add wait for the previous one
 * (about 4 cycles each); 64 lanes give the compiler several vector registers to add into at
 * once, so a pass over a cached row runs at load speed. */
#define LANES 64

static float row_sum(const float *x, long d)
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

static float row_sum_sq(const float *x, long d, float shift)
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
static void row_write(const float *x, const float *w, const float *b, float *y, long d,
                      float mean, float rstd, int stream)
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

/* center = 1: LayerNorm (b may be NULL); center = 0: RMSNorm (b ignored).
 * Returns 1 if streaming stores were compiled in, else 0 (for the Python side to report). */
int normedu_norm_fwd(const float *x, const float *w, const float *b, float *y, long n, long d,
                     float eps, int center, int stream, int threads)
{
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (long i = 0; i < n; i++) {
            const float *xr = x + i * d;
            float mean = center ? row_sum(xr, d) / (float)d : 0.0f;
            float var = row_sum_sq(xr, d, mean) / (float)d;
            row_write(xr, w, center ? b : 0, y + i * d, d, mean, 1.0f / sqrtf(var + eps),
                      stream);
        }
#if defined(__AVX512F__) || defined(__AVX__)
        /* Streaming stores are weakly ordered: each thread fences its own before the team
         * joins, so Python never reads a y that is still in a write-combining buffer. */
        if (stream)
            _mm_sfence();
#endif
    }
#if defined(__AVX512F__) || defined(__AVX__)
    return 1;
#else
    return 0;
#endif
}
