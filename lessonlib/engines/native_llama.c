/* The native decode forward of the real LLM (models/llama.py: RMSNorm, RoPE at explicit
 * positions, GQA, SwiGLU, tied head): every block of a batch-1 cached call over T new tokens, the
 * final norm and the LM head in one call. engines/native.py builds it, engines/llama.py runs it.
 *
 * Why: a one-token step of SmolLM2-135M reads 269 MB of 16-bit weights (8x this CPU's L3), so
 * the step is bounded by memory bandwidth; PyTorch's CPU kernels stay 3-4x above that bound in
 * 16-bit (bench llm-engines). Here every matrix is read once per call whatever T is (panels
 * outside, tokens inside), so a verify pass over T tokens costs about one step while T stays
 * below the roofline's ridge.
 *
 * Conventions (models/llama.py): C = n_embd, H = n_head, G = n_kv_head, D = C / H, F = n_hidden,
 * V = vocab, S = the cache's capacity, Q = H D + 2 G D (the fused q/k/v width).
 *   x      (T, C) float32 residual stream (out: the last block's output, before norm_f)
 *   kv     (n_layer, 2, G, S, D) float32: LlamaKVCache.kv; the T new keys (rotated) and values go to
 *          slots start .. start+T-1, then token t attends over the slots its row of `allowed` marks
 *   allowed (T, start+T) uint8 (1 = may attend; gpt.prefix_mask's non -inf entries), or NULL: causal
 *   mats   per layer 4 matrices in panels (out/16, in, 16): qkv (Q, C), o (C, C), gate|up (2F, C),
 *          down (C, F); half precision when f16, else float32. head (V, C) likewise (the tied
 *          embedding: token rows are read from it too).
 *   norms  per layer 2 float vectors (norm_1, norm_2); norm_f
 *   cosb, sinb  (n_pos, D/2) RoPE tables (models.llama.rope_tables' first half), rows = positions
 *
 * Batch invariance (tests/engines/test_native_llama.py checks it bitwise): every number a token
 * gets is computed by the same instructions in the same order whatever T, the token's index in
 * the pass, the thread count or the slots its visible keys sit in. A product's output is one
 * chain of FMAs over the inputs in order (panels need no horizontal sum, and how tokens and
 * panels are grouped into register tiles changes which chains run side by side, not any chain);
 * attention first lists the slots a token may see, in order, then runs on that list alone (a
 * tree's node sees the same keys, in the same order, as the same token fed as a chain); norms
 * and activations are per token. So a token's logits are bitwise those of the token fed alone.
 */
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(LESSONLIB_PORTABLE)
#include <immintrin.h>
#define SIMD 1
#else
#define SIMD 0
#endif
/* AVX-512: a panel row of 16 outputs is one register, and 32 registers hold up to 12 tokens' sums
 * at once. Each output lane is still one FMA chain over the inputs in order, so the numbers are
 * bitwise those of the AVX2 kernel (the tests build both). */
#if SIMD && defined(__AVX512F__) && !defined(LESSONLIB_NO_AVX512)
#define SIMD512 1
#else
#define SIMD512 0
#endif

#define MAX_T 64   /* engines/llama.py's MAX_T: longer calls run the readable forward */
#define HEAD_MAX_T 4096  /* engines/llama.py's HEAD_MAX_T: an EAGLE-3 head's commit of a whole prompt */
#define SPLIT (1 << 16)  /* a product or attention of fewer multiply-adds runs on one thread */

/* 2 when this build uses AVX-512, 1 for AVX2/FMA/F16C, 0 for the portable C path (ARM, older x86) */
int llama_simd(void) { return SIMD + SIMD512; }

static int nth = 1;
int lessonlib_set_threads(int n) {
#ifdef _OPENMP
    nth = n < 1 ? 1 : n;
#else
    nth = 1;
#endif
    return nth;
}

/* for k in 0..n-1: body, split between the threads only when `split` (no OpenMP region on one
 * thread: entering one costs about a microsecond even when it runs on one) */
#define FOR(split, k, n, ...)                                                   \
    do {                                                                        \
        if (split) {                                                            \
            _Pragma("omp parallel for num_threads(nth) schedule(static)")       \
            for (int k = 0; k < (n); k++) __VA_ARGS__;                          \
        } else                                                                  \
            for (int k = 0; k < (n); k++) __VA_ARGS__;                          \
    } while (0)

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* half -> float without F16C (IEEE binary16: subnormals, infinities and NaN kept) */
static inline float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, bits;
    if (e == 31) bits = sign | 0x7f800000 | (m << 13);
    else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) bits = sign;
    else {  /* subnormal: normalise */
        e = 113;
        while (!(m & 1024)) { m <<= 1; e--; }
        bits = sign | (e << 23) | ((m & 1023) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#if SIMD
/* Software prefetch of the weights ahead of a tile's loads, one request per 64-byte line, by the
 * first token group only: into L1 PF bytes ahead (PF_MANY for a tile of three or more tokens,
 * which spends longer on each line), and into L2 PF_L2 bytes ahead, so the next lines are on
 * their way from memory while the FMAs run. Without the L2 request and the longer L1 distance the
 * loads and the arithmetic of a verify pass took turns instead of overlapping: on one Zen 4 core
 * r(5) measured 1.52-1.56 without them and 1.20-1.25 with them, the one-token step no slower
 * (SmolLM2 in f16, three rounds of the two builds taking turns). A prefetch past the end of the
 * weights is harmless (it never faults). */
#define PF 512
#define PF_MANY 2048
#define PF_L2 8192
static inline __attribute__((always_inline)) void prefetch_rows(const char *w, int NT) {
    _mm_prefetch(w + (NT > 2 ? PF_MANY : PF), _MM_HINT_T0);
    _mm_prefetch(w + PF_L2, _MM_HINT_T1);
}

/* NP panels x NT tokens of y (T, out) = x (T, in) W^T (+= when add), panel P (in, 16) after
 * panel P: each input row of 16 weights is widened once, then multiplied by every token's x[i]
 * broadcast; every output lane is one FMA chain over i = 0 .. in-1 (batch invariance). */
static inline __attribute__((always_inline)) void ptile(const char *P, int f16, int in, const float *x, int t0,
                                                        int NP, int NT, float *y, int out, int o, int add) {
    __m256 acc[4][6][2];
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++) acc[p][t][0] = acc[p][t][1] = _mm256_setzero_ps();
    const size_t row = 16 * (f16 ? 2 : 4), panel = (size_t)in * row;
    for (int i = 0; i < in; i++)
        for (int p = 0; p < NP; p++) {
            const char *w = P + p * panel + (size_t)i * row;
            if (t0 == 0 && (!f16 || (i & 1) == 0)) prefetch_rows(w, NT);
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
                float *dst = y + (size_t)(t0 + t) * out + o + 16 * p + 8 * h;
                _mm256_storeu_ps(dst, add ? _mm256_add_ps(acc[p][t][h], _mm256_loadu_ps(dst)) : acc[p][t][h]);
            }
}
#endif

#if SIMD512
/* ptile with 512-bit registers: NP panels x NT tokens, one register per panel row and token */
static inline __attribute__((always_inline)) void ptile512(const char *P, int f16, int in, const float *x, int t0,
                                                           int NP, int NT, float *y, int out, int o, int add) {
    __m512 acc[4][12];
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++) acc[p][t] = _mm512_setzero_ps();
    const size_t row = 16 * (f16 ? 2 : 4), panel = (size_t)in * row;
    for (int i = 0; i < in; i++)
        for (int p = 0; p < NP; p++) {
            const char *w = P + p * panel + (size_t)i * row;
            if (t0 == 0 && (!f16 || (i & 1) == 0)) prefetch_rows(w, NT);
            __m512 wv = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w)) : _mm512_loadu_ps((const float *)w);
            for (int t = 0; t < NT; t++)
                acc[p][t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[(size_t)(t0 + t) * in + i]), acc[p][t]);
        }
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++) {
            float *dst = y + (size_t)(t0 + t) * out + o + 16 * p;
            _mm512_storeu_ps(dst, add ? _mm512_add_ps(acc[p][t], _mm512_loadu_ps(dst)) : acc[p][t]);
        }
}
#endif

/* The same product for one panel and up to 6 tokens in portable C: 16 lanes per token, each an
 * FMA-or-multiply-add chain over i in order (the compiler vectorises the lane loop). */
static void ptile_c(const char *P, int f16, int in, const float *x, int t0, int NT, float *y, int out, int o,
                    int add) {
    float acc[6][16] = {{0}};
    for (int i = 0; i < in; i++) {
        float w[16];
        if (f16)
            for (int l = 0; l < 16; l++) w[l] = h2f(((const uint16_t *)P)[(size_t)i * 16 + l]);
        else
            memcpy(w, (const float *)P + (size_t)i * 16, sizeof w);
        for (int t = 0; t < NT; t++) {
            float xb = x[(size_t)(t0 + t) * in + i];
            for (int l = 0; l < 16; l++) acc[t][l] += w[l] * xb;
        }
    }
    for (int t = 0; t < NT; t++)
        for (int l = 0; l < 16; l++) {
            float *dst = y + (size_t)(t0 + t) * out + o + l;
            *dst = add ? *dst + acc[t][l] : acc[t][l];
        }
}

/* Outputs o .. o + 16 * per - 1 of y (T, out) for every token. One token: 4 panels side by side
 * (8 chains in flight keep both FMA units busy); two: 2 panels; more: one panel, tokens in groups
 * of up to 6 (12 sums in registers), split evenly (7 tokens: 4 + 3). */
static void panels(const void *W, int f16, const float *x, float *y, int T, int in, int out, int add, int o,
                   int per) {
    const size_t panel = (size_t)in * 16 * (f16 ? 2 : 4);
    const char *P = (const char *)W + (size_t)(o / 16) * panel;
    int n = (out - o) / 16 < per ? (out - o) / 16 : per;
#if SIMD512
    if (T == 1 && n == 4) { ptile512(P, f16, in, x, 0, 4, 1, y, out, o, add); return; }
    if (T == 2 && n == 2) { ptile512(P, f16, in, x, 0, 2, 2, y, out, o, add); return; }
    for (int p = 0; p < n; p++, P += panel, o += 16)
        for (int g = (T + 11) / 12, t0 = 0; g > 0; g--) {  /* up to 12 tokens a group, split evenly */
            int nt = (T - t0) / g;
            switch (nt) {
                case 1: ptile512(P, f16, in, x, t0, 1, 1, y, out, o, add); break;
                case 2: ptile512(P, f16, in, x, t0, 1, 2, y, out, o, add); break;
                case 3: ptile512(P, f16, in, x, t0, 1, 3, y, out, o, add); break;
                case 4: ptile512(P, f16, in, x, t0, 1, 4, y, out, o, add); break;
                case 5: ptile512(P, f16, in, x, t0, 1, 5, y, out, o, add); break;
                case 6: ptile512(P, f16, in, x, t0, 1, 6, y, out, o, add); break;
                case 7: ptile512(P, f16, in, x, t0, 1, 7, y, out, o, add); break;
                case 8: ptile512(P, f16, in, x, t0, 1, 8, y, out, o, add); break;
                case 9: ptile512(P, f16, in, x, t0, 1, 9, y, out, o, add); break;
                case 10: ptile512(P, f16, in, x, t0, 1, 10, y, out, o, add); break;
                case 11: ptile512(P, f16, in, x, t0, 1, 11, y, out, o, add); break;
                default: ptile512(P, f16, in, x, t0, 1, 12, y, out, o, add); break;
            }
            t0 += nt;
        }
    return;
#endif
#if SIMD
    if (T == 1 && n == 4) { ptile(P, f16, in, x, 0, 4, 1, y, out, o, add); return; }
    if (T == 2 && n == 2) { ptile(P, f16, in, x, 0, 2, 2, y, out, o, add); return; }
#endif
    for (int p = 0; p < n; p++, P += panel, o += 16)
        for (int g = (T + 5) / 6, t0 = 0; g > 0; g--) {
            int nt = (T - t0) / g;
#if SIMD
            switch (nt) {  /* constants, so that acc lives in registers */
                case 1: ptile(P, f16, in, x, t0, 1, 1, y, out, o, add); break;
                case 2: ptile(P, f16, in, x, t0, 1, 2, y, out, o, add); break;
                case 3: ptile(P, f16, in, x, t0, 1, 3, y, out, o, add); break;
                case 4: ptile(P, f16, in, x, t0, 1, 4, y, out, o, add); break;
                case 5: ptile(P, f16, in, x, t0, 1, 5, y, out, o, add); break;
                default: ptile(P, f16, in, x, t0, 1, 6, y, out, o, add); break;
            }
#else
            ptile_c(P, f16, in, x, t0, nt, y, out, o, add);
#endif
            t0 += nt;
        }
}

/* y (T, out) = x (T, in) W^T, or y += that when add; W in panels, out a multiple of 16. The
 * panels are split between the threads in chunks of `per` (4 for one token: the 4-panel tile). */
static void linear(const void *W, int f16, const float *x, float *y, int T, int in, int out, int add) {
    int per = T == 1 ? 4 : T == 2 ? 2 : 1, chunks = (out / 16 + per - 1) / per;
    FOR(nth > 1 && (size_t)out * in * T > SPLIT, k, chunks, panels(W, f16, x, y, T, in, out, add, 16 * per * k, per));
}

/* out (T, C) = x / rms(x) * w, per token (models.llama.RMSNorm: (x * rsqrt(mean(x^2) + eps)) * w) */
static void rms_norm(const float *x, const float *w, float *out, int T, int C, float eps) {
    for (int t = 0; t < T; t++) {
        const float *r = x + (size_t)t * C;
        float part[8] = {0};  /* 8 partial sums, then a fixed tree: the same order for every token */
        int i = 0;
        for (; i + 8 <= C; i += 8)
            for (int l = 0; l < 8; l++) part[l] += r[i + l] * r[i + l];
        for (; i < C; i++) part[i % 8] += r[i] * r[i];
        float ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
        float inv = 1.0f / sqrtf(ss / C + eps);
        for (i = 0; i < C; i++) out[(size_t)t * C + i] = (r[i] * inv) * w[i];
    }
}

/* RoPE in place on n heads of D floats at `pos` (Hugging Face's rotate-half: pair (j, j + D/2)) */
static void rope(float *v, int n, int D, const float *cosb, const float *sinb, int64_t pos) {
    int half = D / 2;
    const float *c = cosb + (size_t)pos * half, *s = sinb + (size_t)pos * half;
    for (int h = 0; h < n; h++) {
        float *a = v + (size_t)h * D;
        for (int j = 0; j < half; j++) {
            float x1 = a[j], x2 = a[j + half];
            a[j] = x1 * c[j] - x2 * s[j];
            a[j + half] = x2 * c[j] + x1 * s[j];
        }
    }
}

#if SIMD
/* e^x for 8 floats (native.c's exp8: Cephes' expf, about 2 ulp; x clamped to [-87, 87]) */
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

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* (a[0] summed, ..., a[7] summed): 8 horizontal sums at once, each by the same tree of adds */
static inline __m256 sum8(const __m256 a[8]) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 lo = _mm256_hadd_ps(s01, s23), hi = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}
#endif

/* silu(g) * u for F values of one token (models.llama: F.silu(gate(h)) * up(h)) */
static void swiglu(const float *g, const float *u, float *h, int F) {
    int j = 0;
#if SIMD
    for (; j + 8 <= F; j += 8) {
        __m256 v = _mm256_loadu_ps(g + j), e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_storeu_ps(h + j, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                              _mm256_loadu_ps(u + j)));
    }
#endif
    for (; j < F; j++) h[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
}

/* Attention of token t, query head h over the n slots in `seen` (in order): out (D) =
 * softmax(q K^T / sqrt(D)) V. Depends only on q, n and the listed keys/values, never on where
 * they sit or which other tokens share the pass: batch invariant. sc: n + 8 floats of scratch. */
static void attend_one(const float *q, const float *K, const float *Vv, const int *seen, int n, int D,
                       float *sc, float *out) {
    float scale = 1.0f / sqrtf((float)D), top = -INFINITY, total = 0;
    int j = 0;
#if SIMD
    if (D == 64) {  /* 8 slots at a time: 8 dot products, one 8-way sum (missing slots: zeros) */
        __m256 qv[8], tops = _mm256_set1_ps(-INFINITY);
        for (int c = 0; c < 8; c++) qv[c] = _mm256_loadu_ps(q + 8 * c);
        for (int j0 = 0; j0 < n; j0 += 8) {
            __m256 a[8];
            for (int k = 0; k < 8; k++) {
                a[k] = _mm256_setzero_ps();
                if (j0 + k >= n) continue;
                const float *kr = K + (size_t)seen[j0 + k] * D;
                a[k] = _mm256_mul_ps(qv[0], _mm256_loadu_ps(kr));
                for (int c = 1; c < 8; c++) a[k] = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(kr + 8 * c), a[k]);
            }
            __m256 sv = _mm256_mul_ps(sum8(a), _mm256_set1_ps(scale));
            _mm256_storeu_ps(sc + j0, sv);
            if (j0 + 8 > n)  /* the padding must not win the max */
                sv = _mm256_blendv_ps(sv, _mm256_set1_ps(-INFINITY),
                                      _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                                    _mm256_set1_ps((float)(n - j0)), _CMP_GE_OQ));
            tops = _mm256_max_ps(tops, sv);
        }
        float m[8];
        _mm256_storeu_ps(m, tops);
        for (int k = 0; k < 8; k++) top = m[k] > top ? m[k] : top;
        j = n;
    }
#endif
    for (; j < n; j++) {
        const float *k = K + (size_t)seen[j] * D;
        float part[8] = {0};
        for (int d = 0; d + 8 <= D; d += 8)
            for (int l = 0; l < 8; l++) part[l] += q[d + l] * k[d + l];
        float s = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
        sc[j] = s * scale;
        if (sc[j] > top) top = sc[j];
    }
    j = 0;
#if SIMD
    __m256 sum = _mm256_setzero_ps(), tv = _mm256_set1_ps(top);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), tv));
        _mm256_storeu_ps(sc + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    total = hsum(sum);
#endif
    for (; j < n; j++) {
        sc[j] = expf(sc[j] - top);
        total += sc[j];
    }
    float inv = 1.0f / total;
#if SIMD
    if (D == 64) {  /* sum_j e_j V[seen_j] in 8 registers, even and odd slots apart, normalised at the end */
        __m256 acc[8], odd[8];
        for (int c = 0; c < 8; c++) acc[c] = odd[c] = _mm256_setzero_ps();
        for (j = 0; j + 2 <= n; j += 2) {
            const float *v0 = Vv + (size_t)seen[j] * D, *v1 = Vv + (size_t)seen[j + 1] * D;
            __m256 p0 = _mm256_set1_ps(sc[j]), p1 = _mm256_set1_ps(sc[j + 1]);
            for (int c = 0; c < 8; c++) {
                acc[c] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * c), acc[c]);
                odd[c] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v1 + 8 * c), odd[c]);
            }
        }
        if (j < n) {
            const float *v0 = Vv + (size_t)seen[j] * D;
            __m256 p0 = _mm256_set1_ps(sc[j]);
            for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * c), acc[c]);
        }
        __m256 iv = _mm256_set1_ps(inv);
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(_mm256_add_ps(acc[c], odd[c]), iv));
        return;
    }
#endif
    for (int d = 0; d < D; d++) out[d] = 0;
    for (j = 0; j < n; j++) {
        const float *v = Vv + (size_t)seen[j] * D;
        float p = sc[j];
        for (int d = 0; d < D; d++) out[d] += p * v[d];
    }
    for (int d = 0; d < D; d++) out[d] *= inv;
}

/* The bounds every call checks before it touches memory: the cache holds start + T slots (-5),
 * every token id is a row of the V-row embedding (-3), every position a row of the RoPE table (-4). */
static int check_inputs(const int64_t *tokens, const int64_t *positions, int T, int start, int S, int V, int n_pos) {
    if (start < 0 || start + T > S) return -5;
    for (int t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= V) return -3;
        if (positions[t] < 0 || positions[t] >= n_pos) return -4;
    }
    return 0;
}

/* The slots each of T tokens sees, in order (the same list every layer): seen (T, end) rows,
 * count (T,). allowed (T, end) or NULL (causal after `start`). Returns -6 when a token sees none. */
static int list_slots(const uint8_t *allowed, int T, int start, int end, int *seen, int *count) {
    for (int t = 0; t < T; t++) {
        int n = 0;
        for (int j = 0; j < end; j++)
            if (allowed ? allowed[(size_t)t * end + j] != 0 : j <= start + t) seen[(size_t)t * end + n++] = j;
        if (!n) return -6;
        count[t] = n;
    }
    return 0;
}

/* Row `token` of a (V, C) matrix in panels (the tied embedding), widened to float32 */
static void embed_row(const void *head, int f16, int C, int64_t token, float *out) {
    size_t at = (size_t)(token / 16) * C * 16 + token % 16;
    for (int i = 0; i < C; i++)
        out[i] = f16 ? h2f(((const uint16_t *)head)[at + (size_t)i * 16]) : ((const float *)head)[at + (size_t)i * 16];
}

/* Attention of one decoder layer after its q|k|v product: big (T, Q) rows are rotated at their
 * positions, the keys and values go to slots start.. of kvl (2, G, S, D), then att (T, C) =
 * every query head over the slots its token sees (GQA: head h reads K/V head h / (H / G)). */
static void attention(float *big, int T, int H, int G, int D, int S, int start, const int64_t *positions,
                      const float *cosb, const float *sinb, float *kvl, const int *seen, const int *count, int end,
                      float *score, float *att) {
    int Q = (H + 2 * G) * D, C = H * D;
    for (int t = 0; t < T; t++) {
        float *r = big + (size_t)t * Q;
        rope(r, H + G, D, cosb, sinb, positions[t]);
        for (int g = 0; g < G; g++) {
            memcpy(kvl + ((size_t)g * S + start + t) * D, r + (size_t)(H + g) * D, D * sizeof(float));
            memcpy(kvl + ((size_t)(G + g) * S + start + t) * D, r + (size_t)(H + G + g) * D, D * sizeof(float));
        }
    }
    FOR(nth > 1 && T * H > 1 && (size_t)T * end * C > SPLIT, th, T * H, {
        int t = th / H, h = th % H, g = h / (H / G);
        attend_one(big + (size_t)t * Q + (size_t)h * D, kvl + (size_t)g * S * D, kvl + (size_t)(G + g) * S * D,
                   seen + (size_t)t * end, count[t], D, score + (size_t)thread_id() * (end + 8),
                   att + (size_t)t * C + (size_t)h * D);
    });
}

/* x (T, C) += down(silu(gate(h)) * up(h)), h = rms_norm(x) * norm: the SwiGLU half of a layer.
 * ln (T, C), big (T, 2F), hid (T, F) scratch. */
static void mlp(float *x, const float *norm, const void *gate_up, const void *down, int f16, int T, int C, int F,
                float eps, float *ln, float *big, float *hid) {
    rms_norm(x, norm, ln, T, C, eps);
    linear(gate_up, f16, ln, big, T, C, 2 * F, 0);  /* gate | up, (T, 2F) */
    for (int t = 0; t < T; t++) swiglu(big + (size_t)t * 2 * F, big + (size_t)t * 2 * F + F, hid + (size_t)t * F, F);
    linear(down, f16, hid, x, T, F, C, 1);  /* x += down(h) */
}

/* Every block over the T new tokens whose embeddings are x (T, C), in place (the stream after the
 * last block is left in x). dims as llama_forward's (n_layer, C, H, G, F, -, S, -, f16); mats,
 * norms: 4 and 2 per layer; keep as llama_forward's. Shared by the target and the draft model.
 * Returns 0, -1 (no memory) or -6 (a token that may see no slot). */
static int blocks(const int *dims, void *const *mats, float *const *norms, const float *cosb, const float *sinb,
                  float eps, const int64_t *positions, int T, float *kv, int start, const uint8_t *allowed, float *x,
                  float *keep, const int *keep_layers, int n_keep) {
    int n_layer = dims[0], C = dims[1], H = dims[2], G = dims[3], F = dims[4], S = dims[6], f16 = dims[8];
    int D = C / H, Q = (H + 2 * G) * D, end = start + T;
    size_t tc = (size_t)T * C, wide = (size_t)T * (Q > 2 * F ? Q : 2 * F);
    float *buf = malloc(sizeof(float) * (tc * 2 + wide + (size_t)T * F + (size_t)(end + 8) * nth));
    int *seen = malloc(sizeof(int) * ((size_t)T * end + T));
    if (!buf || !seen) { free(buf); free(seen); return -1; }
    float *ln = buf, *att = buf + tc, *big = buf + 2 * tc, *hid = big + wide, *score = hid + (size_t)T * F;
    int *count = seen + (size_t)T * end;
    if (list_slots(allowed, T, start, end, seen, count)) { free(buf); free(seen); return -6; }
    size_t layer_kv = (size_t)2 * G * S * D;
    for (int l = 0; l < n_layer; l++) {
        void *const *m = mats + 4 * l;
        rms_norm(x, norms[2 * l], ln, T, C, eps);
        linear(m[0], f16, ln, big, T, C, Q, 0);  /* q | k | v, (T, Q) */
        attention(big, T, H, G, D, S, start, positions, cosb, sinb, kv + l * layer_kv, seen, count, end, score, att);
        linear(m[1], f16, att, x, T, C, C, 1);  /* x += o(attention) */
        mlp(x, norms[2 * l + 1], m[2], m[3], f16, T, C, F, eps, ln, big, hid);
        for (int k = 0; k < n_keep; k++)
            if (keep_layers[k] == l)
                for (int t = 0; t < T; t++)
                    memcpy(keep + ((size_t)t * n_keep + k) * C, x + (size_t)t * C, C * sizeof(float));
    }
    free(buf);
    free(seen);
    return 0;
}

/* rms(x, norm) of the last n of T rows (T, C), then logits (n, out) = those rows times `head`
 * (out, C) panels: the final norm and an LM head. Returns 0 or -1 (no memory). */
static int head_logits(const float *x, const float *norm, const void *head, int f16, int T, int n, int C, int out,
                       float eps, float *logits) {
    if (!n) return 0;
    float *ln = malloc(sizeof(float) * (size_t)n * C);
    if (!ln) return -1;
    rms_norm(x + (size_t)(T - n) * C, norm, ln, n, C, eps);
    linear(head, f16, ln, logits, n, C, out, 0);
    free(ln);
    return 0;
}

/* The forward (see the top). dims: n_layer, C, H, G, F, V, S, n_pos, f16. tokens, positions (T,)
 * int64. logits (T, V) or NULL. keep NULL or (T, n_keep C): the outputs of blocks keep_layers.
 * Returns 0; -1 no memory; -2 bad sizes; -3 a token id outside 0..V-1; -4 a position outside
 * 0..n_pos-1; -5 the cache too small; -6 a token that may see no slot. */
int llama_forward(const int *dims, void *const *mats, float *const *norms, const void *head, const float *norm_f,
                  const float *cosb, const float *sinb, float eps, const int64_t *tokens, const int64_t *positions,
                  int T, float *kv, int start, const uint8_t *allowed, float *x, float *keep,
                  const int *keep_layers, int n_keep, float *logits) {
    int C = dims[1], H = dims[2], G = dims[3], F = dims[4], V = dims[5], S = dims[6];
    int n_pos = dims[7], f16 = dims[8];
    if (T < 1 || T > MAX_T || C % 16 || F % 16 || V % 16 || H % G || C % H || (C / H) % 16 || n_keep < 0)
        return -2;
    int bad = check_inputs(tokens, positions, T, start, S, V, n_pos);
    if (bad) return bad;
    for (int t = 0; t < T; t++) embed_row(head, f16, C, tokens[t], x + (size_t)t * C);
    bad = blocks(dims, mats, norms, cosb, sinb, eps, positions, T, kv, start, allowed, x, keep, keep_layers, n_keep);
    if (bad) return bad;
    return logits ? head_logits(x, norm_f, head, f16, T, T, C, V, eps, logits) : 0;
}

/* The real LLM's distilled draft model (models/llm_draft.py, LlamaDraftModel.forward) in one call:
 * x = proj_in(the target's embedding rows of the tokens) (T, d), its n_layer blocks (the target's
 * own block code, width d, its own cache), then logits (n_logits, N) of the last n_logits tokens =
 * rms(x, norm) times `out` (N, d): proj_out folded into the draft vocabulary's embedding rows.
 * dims: n_layer, d, H, G, F, V, S, n_pos, f16, Cin (the target's width), N. mats: proj_in (d, Cin),
 * then 4 per layer; norms: 2 per layer, then the final norm. emb: the target's (V, Cin) panels.
 * x (T, d) out. Returns as llama_forward. */
int draft_forward(const int *dims, void *const *mats, float *const *norms, const void *emb, const void *out,
                  const float *cosb, const float *sinb, float eps, const int64_t *tokens, const int64_t *positions,
                  int T, float *kv, int start, const uint8_t *allowed, float *x, int n_logits, float *logits) {
    int n_layer = dims[0], C = dims[1], H = dims[2], G = dims[3], F = dims[4], V = dims[5], S = dims[6];
    int n_pos = dims[7], f16 = dims[8], Cin = dims[9], N = dims[10];
    if (T < 1 || T > HEAD_MAX_T || n_layer < 1 || C % 16 || F % 16 || V % 16 || Cin % 16 || N % 16 || H % G ||
        C % H || (C / H) % 16 || n_logits < 0 || n_logits > T)
        return -2;
    int bad = check_inputs(tokens, positions, T, start, S, V, n_pos);
    if (bad) return bad;
    float *e = malloc(sizeof(float) * (size_t)T * Cin);
    if (!e) return -1;
    for (int t = 0; t < T; t++) embed_row(emb, f16, Cin, tokens[t], e + (size_t)t * Cin);
    linear(mats[0], f16, e, x, T, Cin, C, 0);  /* proj_in */
    free(e);
    bad = blocks(dims, mats + 1, norms, cosb, sinb, eps, positions, T, kv, start, allowed, x, NULL, NULL, 0);
    if (bad) return bad;
    return head_logits(x, norms[2 * n_layer], out, f16, T, n_logits, C, N, eps, logits);
}

/* EAGLE-3's draft step beside this target (models/llm_heads.py, LlamaEagle3Head.forward and
 * draft_logits) in one call: x = fuse(features) when they are the target's fused width (Fin =
 * 3C; Fin = C: the head's own g, used as is); a (T, 2C) = [rms(emb, norm_emb); rms(x, norm_1)];
 * q|k|v = a W^T (Q, 2C); x += o(attention over the head's one-layer cache); x += SwiGLU; g = x;
 * logits (n_logits, N) = rms(g, norm) over the draft vocabulary's rows (the last n_logits tokens).
 * dims: C, H, G, F, V, N, S, n_pos, f16, Fin. mats: fuse (C, Fin) or NULL when Fin = C, qkv, o,
 * gate|up, down. norms: norm_emb, norm_1, norm_2, norm. emb: the target's tied (V, C) panels, the
 * token rows; draft: (N, C) panels. Returns as llama_forward. */
int eagle3_forward(const int *dims, void *const *mats, float *const *norms, const void *emb, const void *draft,
                   const float *cosb, const float *sinb, float eps, const int64_t *tokens, const int64_t *positions,
                   int T, float *kv, int start, const uint8_t *allowed, const float *features, float *g,
                   int n_logits, float *logits) {
    int C = dims[0], H = dims[1], G = dims[2], F = dims[3], V = dims[4], N = dims[5], S = dims[6];
    int n_pos = dims[7], f16 = dims[8], Fin = dims[9];
    if (T < 1 || T > HEAD_MAX_T || C % 16 || F % 16 || V % 16 || N % 16 || H % G || C % H || (C / H) % 16 ||
        (Fin != C && (Fin % C || !mats[0])) || n_logits < 0 || n_logits > T)
        return -2;
    int bad = check_inputs(tokens, positions, T, start, S, V, n_pos);
    if (bad) return bad;
    int D = C / H, Q = (H + 2 * G) * D, end = start + T;
    size_t tc = (size_t)T * C, wide = (size_t)T * (Q > 2 * F ? Q : 2 * F);
    float *buf = malloc(sizeof(float) * (tc * 4 + wide + (size_t)T * F + (size_t)(end + 8) * nth));
    int *seen = malloc(sizeof(int) * ((size_t)T * end + T));
    if (!buf || !seen) { free(buf); free(seen); return -1; }
    float *ln = buf, *att = buf + tc, *a = buf + 2 * tc, *big = buf + 4 * tc, *hid = big + wide;
    float *score = hid + (size_t)T * F;
    int *count = seen + (size_t)T * end;
    if (list_slots(allowed, T, start, end, seen, count)) { free(buf); free(seen); return -6; }
    if (Fin == C) memcpy(g, features, tc * sizeof(float));
    else linear(mats[0], f16, features, g, T, Fin, C, 0);  /* the residual stream x lives in g */
    for (int t = 0; t < T; t++) embed_row(emb, f16, C, tokens[t], ln + (size_t)t * C);
    for (int t = 0; t < T; t++) {  /* a = [rms(emb); rms(x)], token by token */
        rms_norm(ln + (size_t)t * C, norms[0], a + (size_t)t * 2 * C, 1, C, eps);
        rms_norm(g + (size_t)t * C, norms[1], a + (size_t)t * 2 * C + C, 1, C, eps);
    }
    linear(mats[1], f16, a, big, T, 2 * C, Q, 0);  /* q | k | v from 2C */
    attention(big, T, H, G, D, S, start, positions, cosb, sinb, kv, seen, count, end, score, att);
    linear(mats[2], f16, att, g, T, C, C, 1);  /* x += o(attention) */
    mlp(g, norms[2], mats[3], mats[4], f16, T, C, F, eps, ln, big, hid);
    if (n_logits) {
        size_t first = (size_t)(T - n_logits) * C;
        rms_norm(g + first, norms[3], ln, n_logits, C, eps);
        linear(draft, f16, ln, logits, n_logits, C, N, 0);
    }
    free(buf);
    free(seen);
    return 0;
}

/* Medusa's heads of the real LLM (models.llm_medusa.LlamaMedusaHeads.draft_logits) at one
 * position in one call: x = rms(hidden, norm_f); y_k = x + silu(x W_k^T + b_k) for each head
 * k < K; logits (K, N) = y over the draft vocabulary's rows (one product: those rows read once).
 * dims: C, K, N, f16. mats: the K heads' (C, C) panels; biases: K (C,) float32; draft: (N, C)
 * panels. Returns 0, or -1 (out of memory) / -2 (sizes it does not run). */
int medusa_forward(const int *dims, void *const *mats, float *const *biases, const float *norm_f, float eps,
                   const void *draft, const float *hidden, float *logits) {
    int C = dims[0], K = dims[1], N = dims[2], f16 = dims[3];
    if (C < 16 || C % 16 || K < 1 || K > HEAD_MAX_T || N < 16 || N % 16) return -2;
    float *buf = malloc(sizeof(float) * (size_t)C * (K + 2));
    if (!buf) return -1;
    float *x = buf, *h = buf + C, *y = buf + 2 * C;
    rms_norm(hidden, norm_f, x, 1, C, eps);
    for (int k = 0; k < K; k++) {
        linear(mats[k], f16, x, h, 1, C, C, 0);
        float *yk = y + (size_t)k * C;
        for (int c = 0; c < C; c++) {
            float z = h[c] + biases[k][c];
            yk[c] = x[c] + z / (1.0f + expf(-z));  /* x + SiLU(W x + b) */
        }
    }
    linear(draft, f16, y, logits, K, C, N, 0);
    free(buf);
    return 0;
}
