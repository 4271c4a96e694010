/*
 * dtype.c - facts about tensor element types (block sizes and names).
 */
#include "base.h"

typedef struct dtype_info {
    const char *name;
    int block;       // elements per block
    int block_bytes; // bytes per block
} dtype_info;

static const dtype_info infos[RP_DTYPE_COUNT] = {
    [RP_DTYPE_F32] = {"f32", 1, 4},       [RP_DTYPE_F16] = {"f16", 1, 2},
    [RP_DTYPE_BF16] = {"bf16", 1, 2},     [RP_DTYPE_Q4_0] = {"q4_0", 32, 18},
    [RP_DTYPE_Q5_0] = {"q5_0", 32, 22},   [RP_DTYPE_Q8_0] = {"q8_0", 32, 34},
    [RP_DTYPE_Q4_K] = {"q4_K", 256, 144}, [RP_DTYPE_Q5_K] = {"q5_K", 256, 176},
    [RP_DTYPE_Q6_K] = {"q6_K", 256, 210}, [RP_DTYPE_Q8_K] = {"q8_K", 256, 292},
};

bool rp_dtype_valid(int t)
{
    return t >= 0 && t < RP_DTYPE_COUNT && infos[t].name != NULL;
}

const char *rp_dtype_name(rp_dtype t)
{
    return rp_dtype_valid((int)t) ? infos[t].name : "?";
}

int rp_dtype_block(rp_dtype t)
{
    return rp_dtype_valid((int)t) ? infos[t].block : 0;
}

int rp_dtype_block_bytes(rp_dtype t)
{
    return rp_dtype_valid((int)t) ? infos[t].block_bytes : 0;
}

bool rp_dtype_is_quant(rp_dtype t)
{
    return rp_dtype_block(t) > 1;
}

bool rp_dtype_row_bytes(rp_dtype t, int64_t n, size_t *out)
{
    int blk = rp_dtype_block(t);
    if (blk == 0 || n < 0 || n % blk != 0)
        return false;
    return rp_mul_size((size_t)(n / blk), (size_t)rp_dtype_block_bytes(t), out);
}
