/* The native decode forward: the GPT of models/gpt.py over T new tokens after a KV cache,
 * batch 1, in one call (engines/native.py builds and loads it; python -m lessonlib.bench
 * bandwidth measures it).
 *
 * Why C: the shipped target's one-token step is 24 blocks of small products (160 wide). In
 * PyTorch each block is about a dozen operator calls, and their fixed cost, not arithmetic or
 * memory traffic, set the step (fast.py's MEASURED). Here a block is a few loops over the
 * weights, so the step costs what the weights cost to read and multiply.
 *
 * Conventions (the same as gpt.py): C = n_embd, H = n_head, D = C / H, S = block_size.
 *   x        (T, C) float32 residual stream, updated in place
 *   kv       (n_layer, 2, H, S, D) float32: the KVCache's tensor; keys/values of the T new tokens
 *            are written at slots start .. start+T-1, then attention reads slots 0 .. start+T-1
 *   mask     (T, start+T) additive float32 (0 = may attend, -inf = may not; gpt.prefix_mask),
 *            or NULL: causal (new token t sees slots 0 .. start+t)
 *   mats     per layer 4 matrices qkv (3C, C), proj (C, C), fc (4C, C), fc_out (C, 4C): (out, in)
 *            row-major as nn.Linear stores them, or in panels (out / 16, in, 16) when panel != 0
 *            (see panels()); half precision when f16 != 0, else float
 *   vecs     per layer 8 float vectors: ln_1 w, b; qkv b; proj b; ln_2 w, b; fc b; fc_out b
 * Every matrix is read once per call, whatever T is: the product loops over output panels
 * outside and over tokens inside, so a verify pass over T tokens adds the arithmetic of its
 * tokens to a one-token step, not another read of the weights (bench bandwidth, bench peers).
 * Half-precision weights are used only when they hold the float32 weights exactly (native.py
 * checks), so f16 changes memory traffic, not the numbers. Sums run in another order than
 * PyTorch's: results agree to float32 rounding (tests/engines/test_native.py).
 * Threads: torch's thread count (lessonlib.threads: one by default), through OpenMP, for the
 * larger products and attention (SPLIT); the other steps are short and run on one thread.
 */
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SIMD 1
#else
#define SIMD 0
#endif

/* 1 when this build reads half-precision weights (x86 with AVX2, FMA and F16C), else 0 */
int lessonlib_has_f16(void) { return SIMD; }

/* Threads for the products and attention (the caller passes torch's thread count): the output
 * rows of a product, and the (token, head) pairs of attention, are split between them. */
static int nth = 1;
#define SPLIT (1 << 16)  /* a product or attention of more multiply-adds than this is split; a smaller
                            one costs less than waking a second thread (the one-layer draft's all do) */
int lessonlib_set_threads(int n) {
#ifdef _OPENMP
    nth = n < 1 ? 1 : n;
#else
    nth = 1;
#endif
    return nth;
}

/* for (k = 0; k < n; k++) body, split between the threads when `split`. Not one `omp parallel for
 * ... if (split)`: a region entered with a false condition still costs about a microsecond, and a
 * forward enters about a hundred (measured: a one-token step of the shipped target 0.62 -> 0.56 ms). */
#define FOR(split, k, n, body)                                                  \
    do {                                                                        \
        if (split) {                                                            \
            _Pragma("omp parallel for num_threads(nth) schedule(static)")       \
            for (int k = 0; k < (n); k++) body;                                 \
        } else                                                                  \
            for (int k = 0; k < (n); k++) body;                                 \
    } while (0)

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#if SIMD
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#if SIMD
/* RO output rows x NT tokens of y = x W^T, W (out, in) row-major, over in (a multiple of 8): the
 * path of a matrix not in panels (rows()). RO*NT independent sums (at most 12, so that they, the
 * weights and the tokens fit the 16 vector registers); each weight vector is loaded (and widened)
 * once for NT tokens. RO and NT are constants at every call, so the arrays below live in
 * registers. The first token group also asks for the weights AHEAD rows further on, one request
 * per 64-byte line (a 3-token pass 2.31 -> 1.83 ms when this was the only path). */
#define AHEAD 8
static inline __attribute__((always_inline)) void tile(const void *W, int f16, const float *x, int in, int o,
                                                       int t0, int RO, int NT, float out[8][4]) {
    __m256 acc[8][4];
    for (int r = 0; r < RO; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    for (int i = 0; i < in; i += 8) {
        __m256 xv[4];
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + (size_t)(t0 + t) * in + i);
        if (t0 == 0 && (i & (f16 ? 31 : 15)) == 0)  /* past the last row it asks for nothing useful, harmlessly */
            for (int r = 0; r < RO; r++)
                _mm_prefetch((const char *)W + ((size_t)(o + AHEAD + r) * in + i) * (f16 ? 2 : 4), _MM_HINT_T0);
        for (int r = 0; r < RO; r++) {
            size_t at = (size_t)(o + r) * in + i;
            __m256 w = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)W + at)))
                           : _mm256_loadu_ps((const float *)W + at);
            for (int t = 0; t < NT; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < RO; r++)
        for (int t = 0; t < NT; t++) out[r][t] = hsum(acc[r][t]);
}
#endif

#if SIMD
/* Panels: W (out, in) stored as (out / 16, in, 16) -- native.py packs every matrix whose out is a
 * multiple of 16 so -- puts a panel's 16 outputs side by side, one 32-byte (half) or 64-byte row
 * per input i, read in order. NP panels x NT tokens: each row is widened once and multiplied by
 * every token's x[i], broadcast; the 2 NP NT sums stay in registers and need no horizontal sum
 * at the end. The row tiles above widen each weight once per token group and end every output in
 * a horizontal sum, which cost more than the products at 160 inputs. Measured on the course's
 * 2-core EPYC (a C harness over the shipped target's 24 blocks after 64 cached tokens, fastest of
 * 60, ms): 1 token 0.55-0.62 -> 0.41-0.52; 2 tokens 0.91 -> 0.52-0.64; 4 tokens 1.57 -> 0.90-1.0;
 * 5 tokens 1.71 -> 1.13-1.24. Sums run in another order: the outputs move within float32 rounding. */
#define PF 512  /* bytes ahead of each panel's reads that are asked for (one request per 64-byte line) */
static inline __attribute__((always_inline)) void ptile(const char *P, int f16, int in, const float *x, int t0,
                                                        int NP, int NT, const float *b, float *y, int out, int o,
                                                        int add) {
    __m256 acc[4][6][2];
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++) acc[p][t][0] = acc[p][t][1] = _mm256_setzero_ps();
    const size_t panel = (size_t)in * 16 * (f16 ? 2 : 4);  /* bytes */
    for (int i = 0; i < in; i++)
        for (int p = 0; p < NP; p++) {
            const char *w = P + p * panel + (size_t)i * 16 * (f16 ? 2 : 4);
            if (!f16 || (i & 1) == 0) _mm_prefetch(w + PF, _MM_HINT_T0);  /* past the end: harmless */
            __m256 w0 = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w)) : _mm256_loadu_ps((const float *)w);
            __m256 w1 = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w + 1))
                            : _mm256_loadu_ps((const float *)w + 8);
            for (int t = 0; t < NT; t++) {
                __m256 xb = _mm256_broadcast_ss(x + (size_t)(t0 + t) * in + i);
                acc[p][t][0] = _mm256_fmadd_ps(w0, xb, acc[p][t][0]);
                acc[p][t][1] = _mm256_fmadd_ps(w1, xb, acc[p][t][1]);
            }
        }
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++)
            for (int h = 0; h < 2; h++) {
                int at = o + 16 * p + 8 * h;
                float *dst = y + (size_t)(t0 + t) * out + at;
                __m256 v = b ? _mm256_add_ps(acc[p][t][h], _mm256_loadu_ps(b + at)) : acc[p][t][h];
                _mm256_storeu_ps(dst, add ? _mm256_add_ps(v, _mm256_loadu_ps(dst)) : v);
            }
}

/* Outputs o .. o + 63 (one token), o + 31 (two) or o + 15 (more) of y = x W^T + b, every token,
 * over panels. At least 8 sums in flight keep the two FMA units fed (4 cycles of latency each):
 * 4 panels for one token, 2 for two; more tokens go in groups of up to 6 (12 sums), as even as
 * possible (7 tokens: 4 + 3, not 6 + 1). */
static void panels(const void *W, int f16, const float *b, const float *x, float *y, int T, int in, int out,
                   int add, int o) {
    const size_t panel = (size_t)in * 16 * (f16 ? 2 : 4);
    const char *P = (const char *)W + (size_t)(o / 16) * panel;
    int left = (out - o) / 16;  /* panels from o on */
    if (T <= 2 && left >= 4 / T) {
        if (T == 1) ptile(P, f16, in, x, 0, 4, 1, b, y, out, o, add);
        else ptile(P, f16, in, x, 0, 2, 2, b, y, out, o, add);
        return;
    }
    for (int p = 0; p < (T <= 2 ? left : 1); p++, P += panel, o += 16)
        for (int g = (T + 5) / 6, t0 = 0; g > 0; g--) {
            int nt = (T - t0) / g;
            switch (nt) {  /* constants, so that acc lives in registers */
                case 1: ptile(P, f16, in, x, t0, 1, 1, b, y, out, o, add); break;
                case 2: ptile(P, f16, in, x, t0, 1, 2, b, y, out, o, add); break;
                case 3: ptile(P, f16, in, x, t0, 1, 3, b, y, out, o, add); break;
                case 4: ptile(P, f16, in, x, t0, 1, 4, b, y, out, o, add); break;
                case 5: ptile(P, f16, in, x, t0, 1, 5, b, y, out, o, add); break;
                default: ptile(P, f16, in, x, t0, 1, 6, b, y, out, o, add); break;
            }
            t0 += nt;
        }
}
#endif

/* rows o .. o + 3 of y = x W^T + b for every token, W (out, in) row-major: the path of a matrix
 * that is not in panels (out not a multiple of 16, or a CPU without AVX2/FMA/F16C) */
static void rows(const void *W, int f16, const float *b, const float *x, float *y, int T, int in, int out,
             int add, int o) {
    int ro = out - o < 4 ? out - o : 4;
    for (int t0 = 0, nt; t0 < T; t0 += nt) {  /* up to 4 rows x 3 tokens: 12 sums in registers */
        nt = T - t0 == 4 ? 2 : T - t0 < 3 ? T - t0 : 3;  /* 4 left: 2 + 2, not 3 + a one-token group */
        float s[8][4];
#if SIMD
        if (in % 8 == 0 && ro == 4) {
            if (nt == 3) tile(W, f16, x, in, o, t0, 4, 3, s);
            else if (nt == 2) tile(W, f16, x, in, o, t0, 4, 2, s);
            else tile(W, f16, x, in, o, t0, 4, 1, s);
        } else if (in % 8 == 0) {
            for (int r = 0; r < ro; r++) {
                float one[8][4];
                if (nt == 3) tile(W, f16, x, in, o + r, t0, 1, 3, one);
                else if (nt == 2) tile(W, f16, x, in, o + r, t0, 1, 2, one);
                else tile(W, f16, x, in, o + r, t0, 1, 1, one);
                for (int t = 0; t < nt; t++) s[r][t] = one[0][t];
            }
        } else
#endif
        {
            for (int r = 0; r < ro; r++) {  /* f16 is refused without SIMD or with in % 8 */
                const float *wf = (const float *)W + (size_t)(o + r) * in;
                for (int t = 0; t < nt; t++) {
                    const float *xt = x + (size_t)(t0 + t) * in;
                    float a = 0;
                    for (int i = 0; i < in; i++) a += wf[i] * xt[i];
                    s[r][t] = a;
                }
            }
        }
        for (int r = 0; r < ro; r++)
            for (int t = 0; t < nt; t++) {
                float v = s[r][t] + (b ? b[o + r] : 0.0f);
                float *dst = y + (size_t)(t0 + t) * out + o + r;
                *dst = add ? *dst + v : v;
            }
    }
}

/* y (T, out) = x (T, in) W^T + b, or y += that when add (the residual); W in panels when panel
 * (out a multiple of 16), else (out, in) row-major. */
static void linear(const void *W, int f16, int panel, const float *b, const float *x, float *y,
                   int T, int in, int out, int add) {
    int split = nth > 1 && (size_t)out * in * T > SPLIT;
#if SIMD
    if (panel) {
        int step = T == 1 ? 64 : T == 2 ? 32 : 16;
        FOR(split, k, (out + step - 1) / step, panels(W, f16, b, x, y, T, in, out, add, k * step));
        return;
    }
#endif
    FOR(split, k, (out + 3) / 4, rows(W, f16, b, x, y, T, in, out, add, 4 * k));
}

/* out (T, C) = LayerNorm(x) with weight w, bias b, eps 1e-5 (nn.LayerNorm's default) */
static void layer_norm(const float *x, const float *w, const float *b, float *out, int T, int C) {
    for (int t = 0; t < T; t++) {
        const float *r = x + (size_t)t * C;
        float mean = 0, var = 0;
        for (int i = 0; i < C; i++) mean += r[i];
        mean /= C;
        for (int i = 0; i < C; i++) var += (r[i] - mean) * (r[i] - mean);
        float inv = 1.0f / sqrtf(var / C + 1e-5f);
        for (int i = 0; i < C; i++) out[(size_t)t * C + i] = (r[i] - mean) * inv * w[i] + b[i];
    }
}

#if SIMD
/* e^x for 8 floats (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, times 2^n); about
 * 2 ulp. x is clamped to [-87, 87], where e^x is a normal float. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

/* GELU, tanh form (F.gelu(approximate="tanh")), in place over n values. 0.5 v (1 + tanh(u)) is
 * v / (1 + e^(-2u)), u = sqrt(2/pi) (v + 0.044715 v^3): one exponential, no tanh. */
static void gelu(float *h, size_t n) {
    const float k = 0.7978845608028654f;
    size_t i = 0;
#if SIMD
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(h + i);
        __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        __m256 u = _mm256_mul_ps(_mm256_set1_ps(k), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v));
        __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
        _mm256_storeu_ps(h + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    }
#endif
    for (; i < n; i++) {
        float v = h[i], u = k * (v + 0.044715f * v * v * v);
        h[i] = v / (1.0f + expf(fminf(-2.0f * u, 87.0f)));
    }
}

/* q . k over D floats */
static inline float dot(const float *q, const float *k, int D) {
    float s = 0;
    int d = 0;
#if SIMD
    if (D % 8 == 0) {
        __m256 a = _mm256_setzero_ps();
        for (; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a);
        s = hsum(a);
    }
#endif
    for (; d < D; d++) s += q[d] * k[d];
    return s;
}

#if SIMD
/* (a[0] summed, ..., a[7] summed) as one vector: the horizontal sums of 8 dot products at once */
static inline __m256 sum8(const __m256 a[8]) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 lo = _mm256_hadd_ps(s01, s23), hi = _mm256_hadd_ps(s45, s67);  /* per 128-bit half: a0..a3, a4..a7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

static inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

/* out (D = 8 NC) = sum_j p_j V[j] with p_j = score[j] * inv: the sum stays in NC registers
 * (NC a constant at each call) instead of going through memory once per position. */
static inline __attribute__((always_inline)) void weigh(const float *score, float inv, const float *V, int last,
                                                        float *out, int NC) {
    __m256 acc[8], odd[8];  /* two sums, even and odd positions: twice the FMAs in flight */
    for (int c = 0; c < NC; c++) acc[c] = odd[c] = _mm256_setzero_ps();
    int j = 0;
    for (; j + 2 <= last; j += 2) {
        __m256 pv = _mm256_set1_ps(score[j]), pw = _mm256_set1_ps(score[j + 1]);
        for (int c = 0; c < NC; c++) {
            acc[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(V + (size_t)j * NC * 8 + 8 * c), acc[c]);
            odd[c] = _mm256_fmadd_ps(pw, _mm256_loadu_ps(V + (size_t)(j + 1) * NC * 8 + 8 * c), odd[c]);
        }
    }
    if (j < last) {
        __m256 pv = _mm256_set1_ps(score[j]);
        for (int c = 0; c < NC; c++) acc[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(V + (size_t)j * NC * 8 + 8 * c), acc[c]);
    }
    __m256 iv = _mm256_set1_ps(inv);  /* normalised once at the end: sum_j e_j V[j] / sum_j e_j */
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(_mm256_add_ps(acc[c], odd[c]), iv));
}
#endif

/* Attention of new token t = th / H, head h = th % H, over the cache slots it may see (attend) */
static void attend_one(const float *qkv, const float *kvl, const float *mask, float *y, float *score,
                       int C, int H, int S, int start, int end, float scale, int th) {
    int D = C / H, t = th / H, h = th % H;
    int last = mask ? end : start + t + 1;  /* slots 0 .. last-1 may be seen */
    float *sc = score + (size_t)thread_id() * end;  /* each thread its own row of scores */
    const float *q = qkv + (size_t)t * 3 * C + h * D;
    const float *K = kvl + (size_t)h * S * D, *V = kvl + (size_t)(H + h) * S * D;
    float top = -INFINITY;
    int j0 = 0;
#if SIMD
    if (D % 8 == 0 && D <= 64) {  /* 8 positions at a time: 8 dot products, then one 8-way sum */
        __m256 qv[8], tops = _mm256_set1_ps(-INFINITY), sv = _mm256_set1_ps(scale);
        for (int c = 0; c < D / 8; c++) qv[c] = _mm256_loadu_ps(q + 8 * c);
        for (; j0 + 8 <= last; j0 += 8) {
            __m256 a[8];
            for (int k = 0; k < 8; k++) {
                const float *kr = K + (size_t)(j0 + k) * D;
                a[k] = _mm256_mul_ps(qv[0], _mm256_loadu_ps(kr));
                for (int c = 1; c < D / 8; c++) a[k] = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(kr + 8 * c), a[k]);
            }
            __m256 m = mask ? _mm256_loadu_ps(mask + (size_t)t * end + j0) : _mm256_setzero_ps();
            __m256 s = _mm256_fmadd_ps(sum8(a), sv, m);  /* -inf where masked: a finite dot plus -inf */
            _mm256_storeu_ps(sc + j0, s);
            tops = _mm256_max_ps(tops, s);
        }
        top = hmax(tops);
    }
#endif
    for (int j = j0; j < last; j++) {
        float m = mask ? mask[(size_t)t * end + j] : 0.0f;
        float s = m == -INFINITY ? -INFINITY : dot(q, K + (size_t)j * D, D) * scale + m;
        sc[j] = s;
        if (s > top) top = s;
    }
    float total = 0;
    int j = 0;
#if SIMD
    __m256 sum = _mm256_setzero_ps(), tv = _mm256_set1_ps(top), none = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= last; j += 8) {  /* e^(s - top), 0 where masked */
        __m256 v = _mm256_loadu_ps(sc + j);
        __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(v, tv)), _mm256_cmp_ps(v, none, _CMP_NEQ_OQ));
        _mm256_storeu_ps(sc + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    total = hsum(sum);
#endif
    for (; j < last; j++) {
        sc[j] = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - top);
        total += sc[j];
    }
    float *out = y + (size_t)t * C + h * D;
    float inv = 1.0f / total;
#if SIMD
    if (D == 32) { weigh(sc, inv, V, last, out, 4); return; }
    if (D == 64) { weigh(sc, inv, V, last, out, 8); return; }
    if (D == 16) { weigh(sc, inv, V, last, out, 2); return; }
#endif
    memset(out, 0, D * sizeof(float));
    for (j = 0; j < last; j++) {
        float p = sc[j] * inv;
        for (int d = 0; d < D; d++) out[d] += p * V[(size_t)j * D + d];
    }
}

/* Attention of the T new tokens: q, k, v rows of qkv (T, 3C); writes k, v into this layer's
 * cache kvl (2, H, S, D) at slots start.., then y (T, C) = softmax(q K^T / sqrt(D) + mask) V. */
static void attend(const float *qkv, float *kvl, const float *mask, float *y, float *score,
                   int T, int C, int H, int S, int start) {
    int D = C / H, end = start + T;
    float scale = 1.0f / sqrtf((float)D);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            memcpy(kvl + ((size_t)h * S + start + t) * D, qkv + (size_t)t * 3 * C + C + h * D, D * sizeof(float));
            memcpy(kvl + ((size_t)(H + h) * S + start + t) * D, qkv + (size_t)t * 3 * C + 2 * C + h * D,
                   D * sizeof(float));
        }
    FOR(nth > 1 && T * H > 1 && (size_t)T * end * C > SPLIT, th, T * H,
        attend_one(qkv, kvl, mask, y, score, C, H, S, start, end, scale, th));
}

/* n_layer blocks over x (T, C) in place (see the top of the file). keep: NULL, or (T, n_keep * C)
 * that receives the output of blocks keep_layers[0..n_keep-1] (EAGLE-3's fused features).
 * Returns 0, or -1 when scratch memory could not be had. */
int lessonlib_blocks(int n_layer, int C, int H, int S, int f16, int panel, void *const *mats, float *const *vecs,
                     float *x, int T, float *kv, int start, const float *mask,
                     float *keep, const int *keep_layers, int n_keep) {
    if (f16 && (!SIMD || C % 8)) return -2;
    size_t tc = (size_t)T * C;
    float *buf = malloc(sizeof(float) * (tc * 2 + tc * 4 + (size_t)(start + T) * nth));
    if (!buf) return -1;
    float *ln = buf, *y = buf + tc, *big = buf + 2 * tc, *score = buf + 6 * tc;  /* big: qkv (T,3C) or h (T,4C) */
    size_t layer_kv = (size_t)2 * H * S * (C / H);
    for (int l = 0; l < n_layer; l++) {
        void *const *m = mats + 4 * l;
        float *const *v = vecs + 8 * l;
        layer_norm(x, v[0], v[1], ln, T, C);
        linear(m[0], f16, panel, v[2], ln, big, T, C, 3 * C, 0);  /* qkv */
        attend(big, kv + l * layer_kv, mask, y, score, T, C, H, S, start);
        linear(m[1], f16, panel, v[3], y, x, T, C, C, 1);  /* x += proj(y) */
        layer_norm(x, v[4], v[5], ln, T, C);
        linear(m[2], f16, panel, v[6], ln, big, T, C, 4 * C, 0);  /* fc */
        gelu(big, tc * 4);
        linear(m[3], f16, panel, v[7], big, x, T, 4 * C, C, 1);  /* x += fc_out(h) */
        for (int k = 0; k < n_keep; k++)
            if (keep_layers[k] == l)
                for (int t = 0; t < T; t++)
                    memcpy(keep + ((size_t)t * n_keep + k) * C, x + (size_t)t * C, C * sizeof(float));
    }
    free(buf);
    return 0;
}

/* logits (T, V) = LayerNorm_f(x) W^T for the tied head W (V, C), in panels when panel. Returns 0,
 * -1 or -2 as above. */
int lessonlib_head(int C, int V, int f16, int panel, const void *W, const float *ln_w, const float *ln_b,
                   const float *x, int T, float *logits) {
    if (f16 && (!SIMD || C % 8)) return -2;
    float *ln = malloc(sizeof(float) * (size_t)T * C);
    if (!ln) return -1;
    layer_norm(x, ln_w, ln_b, ln, T, C);
    linear(W, f16, panel, NULL, ln, logits, T, C, V, 0);
    free(ln);
    return 0;
}

/* An EAGLE head (models/heads.py) over T tokens after `start` cached positions of its kv, batch 1,
 * in one call -- a chain's draft step (T = 1) or a round's commit (the accepted tokens):
 *   f = features, or fuse(features) when fuse_w (EAGLE-3: F = 3C fused target features -> C);
 *   x = fc([wte[tokens], f]); x = Block(x), causal over the cache; g = x;
 *   logits = LayerNorm_f(g[T - 1]) W^T, the target's tied head, for the last token only.
 * tokens (T,) int64 ids of wte (V, C) float32; features (T, F) float32. fuse (C, F), fc (C, 2C) and
 * the block read as lessonlib_blocks does (f16, panel), the head as lessonlib_head (head_f16,
 * head_panel). Writes g (T, C) and logits (V,). Why one call: each step is a few microseconds of
 * C, and from Python each cost tens of microseconds of calls around it.
 * Returns 0, -1 or -2 as above, or -3 for a token id outside 0 .. V-1. */
int lessonlib_eagle_step(int C, int H, int S, int f16, int panel, const float *wte, int V, const int64_t *tokens,
                         int T, const float *features, int F, const void *fuse_w, const float *fuse_b,
                         const void *fc_w, const float *fc_b, void *const *mats, float *const *vecs, float *kv,
                         int start, int head_f16, int head_panel, const void *head_w, const float *ln_w,
                         const float *ln_b, float *g, float *logits) {
    if ((f16 || head_f16) && (!SIMD || C % 8)) return -2;
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V) return -3;
    float *in = malloc(sizeof(float) * (size_t)T * (2 * C + (fuse_w ? C : 0)));
    if (!in) return -1;
    const float *f = features;
    if (fuse_w) {  /* the fused features go after the T rows of [emb, f] */
        linear(fuse_w, f16, panel, fuse_b, features, in + (size_t)T * 2 * C, T, F, C, 0);
        f = in + (size_t)T * 2 * C;
    }
    for (int t = 0; t < T; t++) {
        memcpy(in + (size_t)t * 2 * C, wte + (size_t)tokens[t] * C, C * sizeof(float));
        memcpy(in + (size_t)t * 2 * C + C, f + (size_t)t * C, C * sizeof(float));
    }
    linear(fc_w, f16, panel, fc_b, in, g, T, 2 * C, C, 0);
    free(in);
    int code = lessonlib_blocks(1, C, H, S, f16, panel, mats, vecs, g, T, kv, start, NULL, NULL, NULL, 0);
    return code ? code : lessonlib_head(C, V, head_f16, head_panel, head_w, ln_w, ln_b, g + (size_t)(T - 1) * C, 1,
                                        logits);
}
