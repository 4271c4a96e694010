/*
 * responses.c - the OpenAI Responses API: POST /v1/responses (what Codex calls).
 *
 * Placeholder until the Responses API lands: the route answers 501 in the
 * OpenAI error shape. (Owned by the Anthropic/Responses work; see
 * server_int.h for the seam it is written against.)
 */
#include "server_int.h"

void rp_responses_create(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_fail(&e, 501, NULL, NULL, "POST /v1/responses is not implemented yet");
    rp_reply_error(r, out, &e);
}
