/*
 * half.c - IEEE fp16 and bfloat16 conversions (scalar, exact, round to nearest even).
 */
#include "base.h"

float rp_fp16_to_f32(rp_fp16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { // subnormal: normalise
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

rp_fp16 rp_f32_to_fp16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffff;
    if (absu >= 0x7f800000) // inf or nan
        return (rp_fp16)(sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 : 0));
    if (absu >= 0x477ff000) // rounds to >= 65520: overflow to inf
        return (rp_fp16)(sign | 0x7c00);
    if (absu < 0x38800000) { // subnormal or zero in fp16
        if (absu < 0x33000000)
            return (rp_fp16)sign; // below half the smallest subnormal
        uint32_t man = (absu & 0x7fffff) | 0x800000;
        int shift = 113 - (int)(absu >> 23) + 13; // to align with 2^-24 units
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (rp_fp16)(sign | q);
    }
    uint32_t q = absu - 0x38000000; // rebias exponent by (127-15) << 23
    uint32_t rem = q & 0x1fff;
    q >>= 13;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++;
    return (rp_fp16)(sign | q);
}

rp_bf16 rp_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (rp_bf16)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fff + ((u >> 16) & 1);
    return (rp_bf16)(u >> 16);
}
