/*
 * IEEE binary16 <-> binary32 conversions for the CPU references and the
 * checked run. Bit-exact: round-to-nearest-even, subnormals both ways,
 * infinities, NaN (quiet, top payload bits kept) and overflow to infinity.
 */
#include <string.h>

#include "ops/ops_internal.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) /* infinity or NaN: keep the payload, NaN stays NaN */
        return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return f32_from_bits(sign); /* +-0 */
        /* Subnormal: value = mant * 2^-24; normalise into a binary32 normal. */
        exp = 113; /* biased binary32 exponent of 2^-14, before the shifts */
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            exp--;
        }
        mant &= 0x3ffu;
        return f32_from_bits(sign | (exp << 23) | (mant << 13));
    }
    return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t tk_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;

    if (x > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 rounds to infinity (65520 is a tie, to even) */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) { /* normal binary16 range: >= 2^-14 */
        uint32_t odd = (x >> 13) & 1u;
        x += 0xfffu + odd; /* round to nearest, ties to even */
        return (uint16_t)(sign | ((x - 0x38000000u) >> 13));
    }
    if (x < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 itself handled below) */
        return sign;
    {
        /* Subnormal result: value / 2^-24 rounded to nearest even. A carry
         * into 0x400 produces the smallest normal, which is the right code. */
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t hm = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (hm & 1u)))
            hm++;
        return (uint16_t)(sign | hm);
    }
}
