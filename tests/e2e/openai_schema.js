// openai_schema.js - the required fields and types of every object Rapid returns on
// its OpenAI routes, as OpenAI's API document defines them, and a checker.
//
// Where they come from: the OpenAPI document is generated into the official SDKs'
// types, field for field (`x: T` required, `x?: T` optional, `| null` nullable).
// The newest version the project's reference search holds is openai-node at commit
// 0096df7fe96a (its .stats.yml: 263 endpoints, openapi_spec_hash 2466f6ad496b2733),
// read for src/resources/responses/responses.ts, with
// src/resources/chat/completions/completions.ts at 011cd36a75a9; the rest (legacy
// completions, models, the error object) is from the SDK this suite runs (openai
// 6.30.1: node_modules/openai/resources/{completions,models,shared}.d.ts), which
// agrees with those files wherever both have an object. Issue 21 checked Rapid
// against the August 2026 document, which requires
// `usage.input_tokens_details.cache_write_tokens` in Responses; that version is not
// in the search tool, so this file takes the field from the issue (marked below).
//
// Rules: a required field must be present; a present field (required or optional)
// must have its type, and may be null only where the document says nullable; fields
// the document does not have are allowed (the document's objects are open: Rapid adds
// e.g. `reasoning_content`, `max_model_len`). Deviations are marked where the document
// cannot describe the wire (legacy completion chunks: CompletionChunk below).
import assert from 'node:assert/strict';

/* ---- the schema language ---------------------------------------------------- */

const S = (kind, extra = {}) => ({ kind, ...extra });
const string = S('string');
const integer = S('integer');
const number = S('number');
const boolean = S('boolean');
const any = S('any');
const nullable = (of) => S('nullable', { of });
const array = (of) => S('array', { of });
const oneOf = (...values) => S('enum', { values }); // string literals
const obj = (required, optional = {}) => S('object', { required, optional });
const map = (of) => S('map', { of }); // { [key: string]: of }
const union = (...of) => S('union', { of }); // the first that fits
const byType = (cases) => S('byType', { cases }); // an object discriminated by its `type`

// What is wrong with v as s (at path), or null.
function problem(v, s, path) {
    const got = () => `${path}: expected ${describe(s)}, got ${JSON.stringify(v)}`;
    switch (s.kind) {
        case 'any':
            return v === undefined ? got() : null;
        case 'string':
            return typeof v === 'string' ? null : got();
        case 'integer':
            return Number.isInteger(v) ? null : got();
        case 'number':
            return typeof v === 'number' && Number.isFinite(v) ? null : got();
        case 'boolean':
            return typeof v === 'boolean' ? null : got();
        case 'nullable':
            return v === null ? null : problem(v, s.of, path);
        case 'enum':
            return s.values.includes(v) ? null : got();
        case 'array':
            if (!Array.isArray(v)) return got();
            for (let i = 0; i < v.length; i++) {
                const p = problem(v[i], s.of, `${path}[${i}]`);
                if (p) return p;
            }
            return null;
        case 'map':
            if (!v || typeof v !== 'object' || Array.isArray(v)) return got();
            for (const [k, x] of Object.entries(v)) {
                const p = problem(x, s.of, `${path}[${JSON.stringify(k)}]`);
                if (p) return p;
            }
            return null;
        case 'object':
            if (!v || typeof v !== 'object' || Array.isArray(v)) return got();
            for (const [k, t] of Object.entries(s.required)) {
                if (!(k in v)) return `${path}.${k}: required, missing (in ${JSON.stringify(v)})`;
                const p = problem(v[k], t, `${path}.${k}`);
                if (p) return p;
            }
            for (const [k, t] of Object.entries(s.optional)) {
                if (!(k in v)) continue;
                const p = problem(v[k], t, `${path}.${k}`);
                if (p) return p;
            }
            return null;
        case 'union': {
            const ps = s.of.map((t) => problem(v, t, path));
            return ps.includes(null) ? null : ps.join('; or ');
        }
        case 'byType': {
            if (!v || typeof v !== 'object') return got();
            const t = s.cases[v.type];
            if (!t) return `${path}.type: ${JSON.stringify(v.type)} is none of ${Object.keys(s.cases).join(', ')}`;
            return problem(v, t, path);
        }
        default:
            throw new Error(`unknown schema kind ${s.kind}`);
    }
}

function describe(s) {
    switch (s.kind) {
        case 'nullable':
            return `${describe(s.of)} or null`;
        case 'enum':
            return `one of ${s.values.map((x) => JSON.stringify(x)).join(', ')}`;
        case 'array':
            return `an array of ${describe(s.of)}`;
        case 'object':
        case 'map':
        case 'byType':
            return 'an object';
        case 'union':
            return s.of.map(describe).join(' or ');
        default:
            return `a ${s.kind}`;
    }
}

/* ---- errors (every route) ------------------------------------------------------ */

// shared.d.ts ErrorObject (the document's Error), inside {"error": ...}.
const ErrorObject = obj({ code: nullable(string), message: string, param: nullable(string), type: string });
const ErrorResponse = obj({ error: ErrorObject });

/* ---- chat completions (chat/completions/completions.ts) -------------------------- */

const SERVICE_TIER = nullable(oneOf('auto', 'default', 'flex', 'scale', 'priority'));

// completions.d.ts CompletionUsage (shared by chat and legacy completions).
const CompletionUsage = obj(
    { completion_tokens: integer, prompt_tokens: integer, total_tokens: integer },
    {
        completion_tokens_details: obj(
            {},
            { accepted_prediction_tokens: integer, audio_tokens: integer, reasoning_tokens: integer, rejected_prediction_tokens: integer },
        ),
        prompt_tokens_details: obj({}, { audio_tokens: integer, cached_tokens: integer }),
    },
);

// ChatCompletionTokenLogprob and its TopLogprob.
const TopLogprob = obj({ token: string, bytes: nullable(array(integer)), logprob: number });
const TokenLogprob = obj({ token: string, bytes: nullable(array(integer)), logprob: number, top_logprobs: array(TopLogprob) });
// ChatCompletion.Choice.Logprobs (the chunk's Choice.Logprobs is the same).
const ChoiceLogprobs = obj({ content: nullable(array(TokenLogprob)), refusal: nullable(array(TokenLogprob)) });

// ChatCompletionMessageFunctionToolCall.
const MessageToolCall = obj({ id: string, function: obj({ arguments: string, name: string }), type: oneOf('function') });

// ChatCompletionMessage.
const ChatCompletionMessage = obj(
    { content: nullable(string), refusal: nullable(string), role: oneOf('assistant') },
    {
        annotations: array(obj({ type: string })),
        audio: nullable(obj({ id: string, data: string, expires_at: integer, transcript: string })),
        function_call: nullable(obj({ arguments: string, name: string })),
        tool_calls: array(MessageToolCall),
    },
);

const CHAT_FINISH = oneOf('stop', 'length', 'tool_calls', 'content_filter', 'function_call');

// ChatCompletion and ChatCompletion.Choice.
const ChatCompletion = obj(
    {
        id: string,
        choices: array(obj({ finish_reason: CHAT_FINISH, index: integer, logprobs: nullable(ChoiceLogprobs), message: ChatCompletionMessage })),
        created: integer,
        model: string,
        object: oneOf('chat.completion'),
    },
    { service_tier: SERVICE_TIER, system_fingerprint: string, usage: CompletionUsage },
);

// ChatCompletionChunk, its Choice and Choice.Delta (with Delta.ToolCall).
const ChunkDelta = obj(
    {},
    {
        content: nullable(string),
        function_call: obj({}, { arguments: string, name: string }),
        refusal: nullable(string),
        role: oneOf('developer', 'system', 'user', 'assistant', 'tool'),
        tool_calls: array(
            obj({ index: integer }, { id: string, function: obj({}, { arguments: string, name: string }), type: oneOf('function') }),
        ),
    },
);
const ChatCompletionChunk = obj(
    {
        id: string,
        choices: array(obj({ delta: ChunkDelta, finish_reason: nullable(CHAT_FINISH), index: integer }, { logprobs: nullable(ChoiceLogprobs) })),
        created: integer,
        model: string,
        object: oneOf('chat.completion.chunk'),
    },
    { service_tier: SERVICE_TIER, system_fingerprint: string, usage: nullable(CompletionUsage) },
);

/* ---- legacy completions (completions.d.ts) --------------------------------------- */

const CompletionLogprobs = obj(
    {},
    { text_offset: array(integer), token_logprobs: array(number), tokens: array(string), top_logprobs: array(map(number)) },
);
const completion = (finish, usage) =>
    obj(
        {
            id: string,
            choices: array(obj({ finish_reason: finish, index: integer, logprobs: nullable(CompletionLogprobs), text: string })),
            created: integer,
            model: string,
            object: oneOf('text_completion'),
        },
        { system_fingerprint: string, usage },
    );
// Completion and CompletionChoice.
const FINISH = oneOf('stop', 'length', 'content_filter');
const Completion = completion(FINISH, CompletionUsage);
// A streamed chunk: the document types it as the Completion above, whose
// finish_reason cannot be null, so no chunk before the last could be valid; OpenAI
// sends null until the last chunk, and so does Rapid. And with
// stream_options.include_usage, the document's own description of that option says
// every other chunk has "usage": null. The one deviation here.
const CompletionChunk = completion(nullable(FINISH), nullable(CompletionUsage));

/* ---- models (models.d.ts) -------------------------------------------------------- */

const Model = obj({ id: string, created: integer, object: oneOf('model'), owned_by: string });
// The document's ListModelsResponse.
const ModelList = obj({ object: oneOf('list'), data: array(Model) });

/* ---- Responses (responses/responses.ts) ----------------------------------------- */

// ResponseUsage. cache_write_tokens: issue 21, from the August 2026 document.
const ResponseUsage = obj({
    input_tokens: integer,
    input_tokens_details: obj({ cached_tokens: integer, cache_write_tokens: integer }),
    output_tokens: integer,
    output_tokens_details: obj({ reasoning_tokens: integer }),
    total_tokens: integer,
});

// ResponseOutputText (with its Logprob), ResponseOutputRefusal.
const OutputTextLogprob = obj({
    token: string,
    bytes: array(integer),
    logprob: number,
    top_logprobs: array(obj({ token: string, bytes: array(integer), logprob: number })),
});
const OutputText = obj({ annotations: array(obj({ type: string })), text: string, type: oneOf('output_text') }, { logprobs: array(OutputTextLogprob) });
const OutputRefusal = obj({ refusal: string, type: oneOf('refusal') });
const ReasoningText = obj({ text: string, type: oneOf('reasoning_text') });

const ITEM_STATUS = oneOf('in_progress', 'completed', 'incomplete');
// The output items Rapid produces: ResponseOutputMessage, ResponseFunctionToolCall,
// ResponseReasoningItem (of the document's ResponseOutputItem union).
const OutputItem = byType({
    message: obj(
        { id: string, content: array(byType({ output_text: OutputText, refusal: OutputRefusal })), role: oneOf('assistant'), status: ITEM_STATUS, type: oneOf('message') },
        { phase: nullable(oneOf('commentary', 'final_answer')) },
    ),
    function_call: obj(
        { arguments: string, call_id: string, name: string, type: oneOf('function_call') },
        { id: string, namespace: string, status: ITEM_STATUS },
    ),
    reasoning: obj(
        { id: string, summary: array(obj({ text: string, type: oneOf('summary_text') })), type: oneOf('reasoning') },
        { content: array(ReasoningText), encrypted_content: nullable(string), status: ITEM_STATUS },
    ),
});

// ResponseError.
const ResponseError = obj({
    code: oneOf(
        'server_error', 'rate_limit_exceeded', 'invalid_prompt', 'vector_store_timeout', 'invalid_image',
        'invalid_image_format', 'invalid_base64_image', 'invalid_image_url', 'image_too_large', 'image_too_small',
        'image_parse_error', 'image_content_policy_violation', 'invalid_image_mode', 'image_file_too_large',
        'unsupported_image_media_type', 'empty_image_file', 'failed_to_download_image', 'image_file_not_found',
    ),
    message: string,
});

// Response. (`output_text` is required in the SDK's type, but the SDK adds it to the
// wire object itself: optional here. Rapid sends it anyway.)
const Response = obj(
    {
        id: string,
        created_at: number,
        error: nullable(ResponseError),
        incomplete_details: nullable(obj({}, { reason: oneOf('max_output_tokens', 'content_filter') })),
        instructions: nullable(union(string, array(obj({})))),
        metadata: nullable(map(string)),
        model: string,
        object: oneOf('response'),
        output: array(OutputItem),
        parallel_tool_calls: boolean,
        temperature: nullable(number),
        tool_choice: union(oneOf('none', 'auto', 'required'), obj({ type: string })),
        tools: array(obj({ type: string })),
        top_p: nullable(number),
    },
    {
        background: nullable(boolean),
        completed_at: nullable(number),
        conversation: nullable(obj({ id: string })),
        max_output_tokens: nullable(integer),
        moderation: nullable(obj({})),
        output_text: string,
        previous_response_id: nullable(string),
        prompt: nullable(obj({ id: string })),
        prompt_cache_key: string,
        prompt_cache_retention: nullable(oneOf('in_memory', 'in-memory', '24h')),
        reasoning: nullable(obj({}, { effort: nullable(string), generate_summary: nullable(string), summary: nullable(string) })),
        safety_identifier: string,
        service_tier: SERVICE_TIER,
        status: oneOf('completed', 'failed', 'in_progress', 'cancelled', 'queued', 'incomplete'),
        text: obj({}, { format: obj({ type: string }), verbosity: nullable(oneOf('low', 'medium', 'high')) }),
        top_logprobs: nullable(integer),
        truncation: nullable(oneOf('auto', 'disabled')),
        usage: ResponseUsage,
        user: string,
    },
);

// ResponseTextDeltaEvent.Logprob / ResponseTextDoneEvent.Logprob.
const EventLogprob = obj({ token: string, logprob: number }, { top_logprobs: array(obj({}, { token: string, logprob: number })) });

const ev = (type, fields) => obj({ ...fields, sequence_number: integer, type: oneOf(type) });
const lifecycle = (type) => ev(type, { response: Response }); // ResponseCreatedEvent, ...InProgress, ...Completed, ...
const itemEvent = (type) => ev(type, { item: OutputItem, output_index: integer }); // ResponseOutputItemAdded/DoneEvent
const partEvent = (type) =>
    ev(type, { content_index: integer, item_id: string, output_index: integer, part: byType({ output_text: OutputText, refusal: OutputRefusal, reasoning_text: ReasoningText }) });
const AT = { content_index: integer, item_id: string, output_index: integer };

// The stream events by type: the ones Rapid sends (and `error`, ResponseErrorEvent).
export const RESPONSE_EVENTS = {
    'response.created': lifecycle('response.created'),
    'response.in_progress': lifecycle('response.in_progress'),
    'response.completed': lifecycle('response.completed'),
    'response.incomplete': lifecycle('response.incomplete'),
    'response.failed': lifecycle('response.failed'),
    'response.output_item.added': itemEvent('response.output_item.added'),
    'response.output_item.done': itemEvent('response.output_item.done'),
    'response.content_part.added': partEvent('response.content_part.added'),
    'response.content_part.done': partEvent('response.content_part.done'),
    // ResponseTextDeltaEvent, ResponseTextDoneEvent
    'response.output_text.delta': ev('response.output_text.delta', { ...AT, delta: string, logprobs: array(EventLogprob) }),
    'response.output_text.done': ev('response.output_text.done', { ...AT, logprobs: array(EventLogprob), text: string }),
    // ResponseReasoningTextDeltaEvent, ResponseReasoningTextDoneEvent
    'response.reasoning_text.delta': ev('response.reasoning_text.delta', { ...AT, delta: string }),
    'response.reasoning_text.done': ev('response.reasoning_text.done', { ...AT, text: string }),
    // ResponseFunctionCallArgumentsDeltaEvent, ResponseFunctionCallArgumentsDoneEvent
    'response.function_call_arguments.delta': ev('response.function_call_arguments.delta', { delta: string, item_id: string, output_index: integer }),
    'response.function_call_arguments.done': ev('response.function_call_arguments.done', { arguments: string, item_id: string, name: string, output_index: integer }),
    error: ev('error', { code: nullable(string), message: string, param: nullable(string) }),
};

export const SCHEMAS = {
    ErrorResponse,
    CompletionUsage,
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    Model,
    ModelList,
    Response,
    ResponseUsage,
    ResponseStreamEvent: byType(RESPONSE_EVENTS),
};

// What is wrong with v as the named object (a message naming the path), or null.
export function schemaProblem(v, name) {
    const s = SCHEMAS[name];
    if (!s) throw new Error(`no schema ${name}`);
    return problem(v, s, name);
}

// Fails the test when v is not a valid `name` (one of SCHEMAS' keys).
export function assertSchema(v, name, what = '') {
    const p = schemaProblem(v, name);
    assert.equal(p, null, `${what ? `${what}: ` : ''}not a valid ${name}: ${p}\n  in ${JSON.stringify(v)}`);
}
