/*
 * anthropic.c - the Anthropic Messages API: POST /v1/messages and
 * POST /v1/messages/count_tokens.
 *
 * Placeholder until the Anthropic API lands: both routes answer 501 in the
 * Anthropic error shape. (Owned by the Anthropic/Responses work; see
 * server_int.h for the seam it is written against.)
 */
#include "server_int.h"

void rp_anthropic_messages(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_fail(&e, 501, NULL, NULL, "POST /v1/messages is not implemented yet");
    rp_reply_error(r, out, &e);
}

void rp_anthropic_count_tokens(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_fail(&e, 501, NULL, NULL, "POST /v1/messages/count_tokens is not implemented yet");
    rp_reply_error(r, out, &e);
}
