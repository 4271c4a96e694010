/*
 * openai.c - the OpenAI API: /v1/chat/completions, /v1/completions,
 * GET /v1/models, GET /v1/models/{id}.
 *
 * Skeleton: the handlers answer 501 until the request readers and reply
 * writers land.
 */
#include "server_int.h"

void rp_openai_chat(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_fail(&e, 501, NULL, NULL, "not implemented yet");
    rp_reply_error(r, out, &e);
}

void rp_openai_completions(rp_http_req *r, rp_reply *out)
{
    rp_openai_chat(r, out);
}

void rp_openai_models(rp_http_req *r, rp_reply *out)
{
    rp_openai_chat(r, out);
}

void rp_openai_model(rp_http_req *r, rp_reply *out)
{
    rp_openai_chat(r, out);
}
