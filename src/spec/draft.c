/*
 * draft.c - may this draft model propose tokens for that target?
 *
 * Verification compares token ids, so the two tokenizers must agree on what
 * every id means: the vocabulary string and the decoded bytes of every id,
 * which ids are special or end generation, and the bos/eos/pad ids. The
 * models' embedding tables may be padded differently (Qwen2.5's small and large
 * checkpoints are), as long as both cover every id the tokenizer uses.
 */
#include "spec.h"

#include <stdio.h>

// A token's text for a message: quoted, at most 40 bytes, control bytes as \xNN.
static const char *show(const char *s, size_t len, char *buf, size_t cap)
{
    if (!s)
        return "(no token)";
    size_t at = 0;
    buf[at++] = '"';
    for (size_t i = 0; i < len && at + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) {
            at += (size_t)snprintf(buf + at, cap - at, "...");
            break;
        }
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            at += (size_t)snprintf(buf + at, cap - at, "\\x%02x", c);
        else
            buf[at++] = (char)c;
    }
    snprintf(buf + at, cap - at, "\"");
    return buf;
}

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
    if (!a || !b)
        return a == b;
    return alen == blen && memcmp(a, b, alen) == 0;
}

rp_status rp_spec_check_draft(const rp_tokenizer *target, int32_t target_n_vocab, const rp_tokenizer *draft,
                              int32_t draft_n_vocab)
{
    const char *pre = "the draft model's tokenizer differs from the target's";
    struct {
        const char *name;
        int32_t t, d;
    } ids[] = {
        {"bos", rp_tok_bos(target), rp_tok_bos(draft)},
        {"eos", rp_tok_eos(target), rp_tok_eos(draft)},
        {"pad", rp_tok_pad(target), rp_tok_pad(draft)},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if (ids[i].t != ids[i].d)
            return RP_ERR(RP_ERR_INVALID, "%s: the %s token is %d in the target, %d in the draft", pre, ids[i].name,
                          (int)ids[i].t, (int)ids[i].d);
    int32_t nt = rp_tok_n_vocab(target), nd = rp_tok_n_vocab(draft);
    int32_t n = nt > nd ? nt : nd, last_used = -1;
    char b1[128], b2[128];
    for (int32_t id = 0; id < n; id++) {
        size_t lt = 0, ld = 0;
        const char *tt = id < nt ? rp_tok_text(target, id, &lt) : NULL;
        const char *td = id < nd ? rp_tok_text(draft, id, &ld) : NULL;
        if (!same(tt, lt, td, ld))
            return RP_ERR(RP_ERR_INVALID, "%s: token %d is %s in the target, %s in the draft", pre, (int)id,
                          show(tt, lt, b1, sizeof(b1)), show(td, ld, b2, sizeof(b2)));
        if (!tt)
            continue;
        last_used = id;
        tt = rp_tok_piece(target, id, &lt);
        td = rp_tok_piece(draft, id, &ld);
        if (!same(tt, lt, td, ld))
            return RP_ERR(RP_ERR_INVALID, "%s: token %d decodes to %s in the target, %s in the draft", pre, (int)id,
                          show(tt, lt, b1, sizeof(b1)), show(td, ld, b2, sizeof(b2)));
        if (rp_tok_is_special(target, id) != rp_tok_is_special(draft, id))
            return RP_ERR(RP_ERR_INVALID, "%s: token %d %s is special in the %s only", pre, (int)id,
                          show(tt, lt, b1, sizeof(b1)), rp_tok_is_special(target, id) ? "target" : "draft");
        if (rp_tok_is_eog(target, id) != rp_tok_is_eog(draft, id))
            return RP_ERR(RP_ERR_INVALID, "%s: token %d %s ends generation in the %s only", pre, (int)id,
                          show(tt, lt, b1, sizeof(b1)), rp_tok_is_eog(target, id) ? "target" : "draft");
    }
    if (last_used >= target_n_vocab || last_used >= draft_n_vocab)
        return RP_ERR(RP_ERR_INVALID, "the tokenizer uses ids up to %d but the %s model has only %d embedding rows",
                      (int)last_used, last_used >= target_n_vocab ? "target" : "draft",
                      (int)(last_used >= target_n_vocab ? target_n_vocab : draft_n_vocab));
    return RP_OK;
}
