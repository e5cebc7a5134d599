/* torchlike — the block layouts of ggml's quantised tensor types, byte for
 * byte as a GGUF file stores them, and the per-type facts the kernels and the
 * loader share (values per block, bytes per block).
 *
 * A block holds a fixed number of weights (32 for the legacy types, 256 for
 * the "K" types) and its own scales; a row is a whole number of blocks. The
 * arithmetic that turns a block back into floats is dequant_ref.c, written
 * after ggml's reference dequantize_row_* (ggml-quants.c), whose float
 * results it equals bit for bit (tests/torchlike/test_quant.c). */
#ifndef TORCHLIKE_QUANT_BLOCKS_H
#define TORCHLIKE_QUANT_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#define TL_QK_LEGACY 32 /* values per block of Q4_0 .. Q8_0 */
#define TL_QK_K 256     /* values per super-block of Q2_K .. Q6_K */

/* Scales are IEEE fp16 bits (uint16_t) throughout; every struct below has
 * only 1- and 2-byte members, so none has padding and the sizes are those
 * of the file. */

/* Q4_0: w = d * (q - 8), q in 0..15; qs[j] holds value j (low nibble) and
 * value j + 16 (high nibble). */
typedef struct tl_block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
} tl_block_q4_0; /* 18 bytes */

/* Q4_1: w = d * q + m, q in 0..15, nibbles as Q4_0. */
typedef struct tl_block_q4_1 {
    uint16_t d, m;
    uint8_t qs[16];
} tl_block_q4_1; /* 20 bytes */

/* Q5_0: w = d * (q - 16), q in 0..31: the low four bits as Q4_0, the fifth
 * bit of value j in bit j of the little-endian word qh. */
typedef struct tl_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} tl_block_q5_0; /* 22 bytes */

/* Q5_1: w = d * q + m, bits as Q5_0. */
typedef struct tl_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} tl_block_q5_1; /* 24 bytes */

/* (Q8_0, 34 bytes, is tl_block_q8_0 in weights.h.) */

/* Q2_K: 16 sub-blocks of 16; w = d * (sc & 15) * q - dmin * (sc >> 4),
 * q in 0..3. Each 128 values use 32 bytes of qs: value 32 * k + l of the
 * half is bits 2k..2k+1 of qs[l] (l < 32). */
typedef struct tl_block_q2_k {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} tl_block_q2_k; /* 84 bytes */

/* Q3_K: 16 sub-blocks of 16; w = d * (s - 32) * (q - 4), q in 0..7: two low
 * bits packed as Q2_K, the third in hmask (bit k of hmask[l] for value
 * 32 * k + l); the 16 six-bit scales s packed in 12 bytes. */
typedef struct tl_block_q3_k {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} tl_block_q3_k; /* 110 bytes */

/* Q4_K: 8 sub-blocks of 32; w = d * sc * q - dmin * mn, q in 0..15, with
 * six-bit sc and mn packed in 12 bytes. Each 64 values use 32 bytes of qs:
 * the first 32 in the low nibbles, the next 32 in the high ones. */
typedef struct tl_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} tl_block_q4_k; /* 144 bytes */

/* Q5_K: as Q4_K with a fifth bit: bit k of qh[l] for value 32 * k + l. */
typedef struct tl_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} tl_block_q5_k; /* 176 bytes */

/* Q6_K: 16 sub-blocks of 16; w = d * sc * (q - 32), q in 0..63, sc int8.
 * Each 128 values: four bits in 64 bytes of ql (values l and 64 + l in
 * ql[l]'s nibbles for l < 32, 32 + l and 96 + l in ql[32 + l]'s), two bits
 * in 32 bytes of qh (bits 2k..2k+1 of qh[l] for value 32 * k + l). */
typedef struct tl_block_q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} tl_block_q6_k; /* 210 bytes */

/* Unpack the k-th (0..7) six-bit scale and min of a Q4_K/Q5_K block. */
static inline void tl_k4_scale_min(const uint8_t *s, int k, int *sc, int *mn)
{
    if (k < 4) {
        *sc = s[k] & 63;
        *mn = s[k + 4] & 63;
    } else {
        *sc = (s[k + 4] & 15) | ((s[k - 4] >> 6) << 4);
        *mn = (s[k + 4] >> 4) | ((s[k] >> 6) << 4);
    }
}

/* All eight six-bit scales and mins of a Q4_K/Q5_K block at once (the
 * values of tl_k4_scale_min): w[0] holds scales 0-3 as bytes (little-endian),
 * w[1] scales 4-7, w[2] mins 0-3, w[3] mins 4-7. Words, not bytes, so a
 * kernel can move them into vector registers without a trip through memory. */
static inline void tl_k4_scale_words(const uint8_t *s, uint32_t w[4])
{
    uint32_t w0 = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    uint32_t w1 = (uint32_t)s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 | (uint32_t)s[7] << 24;
    uint32_t w2 = (uint32_t)s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 | (uint32_t)s[11] << 24;
    w[0] = w0 & 0x3f3f3f3fu;
    w[1] = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
    w[2] = w1 & 0x3f3f3f3fu;
    w[3] = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
}

/* The 16 six-bit scales of a Q3_K block, still offset by 32. */
static inline void tl_q3k_scales(const uint8_t *s, int out[16])
{
    for (int k = 0; k < 16; k++) {
        int lo = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
        int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = lo | (hi << 4);
    }
}

#endif
