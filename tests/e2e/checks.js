// checks.js - shape checks shared by the test files: what the OpenAI (chat,
// Responses) and Anthropic services put in their bodies and stream events, field by field, and
// a way to pick a stop string from a greedy reply. Every OpenAI object is also checked
// against the required fields and types of OpenAI's API document (openai_schema.js,
// which names its sources); the checks here add what Rapid itself promises.
import assert from 'node:assert/strict';

import { SERVED } from './harness.js';
import { assertSchema } from './openai_schema.js';

export { assertSchema };

export const isInt = (v) => Number.isInteger(v);

// `created` / `created_at`: Unix seconds, close to now (a generous window).
export function assertUnixSeconds(v, what) {
    assert.ok(isInt(v), `${what} is not an integer: ${JSON.stringify(v)}`);
    const now = Date.now() / 1000;
    assert.ok(Math.abs(v - now) < 3600, `${what} = ${v} is not Unix seconds near now (${Math.round(now)})`);
}

// OpenAI usage: prompt/completion/total tokens and prompt_tokens_details.cached_tokens.
export function assertOpenAIUsage(u, what = 'usage') {
    assert.ok(u && typeof u === 'object', `${what} missing: ${JSON.stringify(u)}`);
    assertSchema(u, 'CompletionUsage', what);
    assert.ok(isInt(u.prompt_tokens) && u.prompt_tokens > 0, `${what}.prompt_tokens: ${JSON.stringify(u)}`);
    assert.ok(isInt(u.completion_tokens) && u.completion_tokens >= 0, `${what}.completion_tokens: ${JSON.stringify(u)}`);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}.total_tokens != prompt + completion`);
    const d = u.prompt_tokens_details;
    assert.ok(d && isInt(d.cached_tokens), `${what}.prompt_tokens_details.cached_tokens missing: ${JSON.stringify(u)}`);
    assert.ok(d.cached_tokens >= 0 && d.cached_tokens <= u.prompt_tokens, `${what}: cached_tokens out of range`);
}

// A non-streaming chat.completion body. Returns choices[0].
export function assertChatCompletion(body, { model = SERVED } = {}) {
    assertSchema(body, 'ChatCompletion');
    assert.equal(typeof body.id, 'string', 'id is a string');
    assert.ok(body.id.startsWith('chatcmpl-'), `id ${JSON.stringify(body.id)} starts with chatcmpl-`);
    assert.equal(body.object, 'chat.completion');
    assertUnixSeconds(body.created, 'created');
    assert.equal(body.model, model, 'model is the served name');
    assert.ok(Array.isArray(body.choices) && body.choices.length === 1, `one choice: ${JSON.stringify(body.choices)}`);
    const c = body.choices[0];
    assert.equal(c.index, 0, 'choices[0].index');
    assert.ok(c.message && c.message.role === 'assistant', `message.role: ${JSON.stringify(c.message)}`);
    assert.ok('content' in c.message, 'message.content present');
    assert.ok(c.message.content === null || typeof c.message.content === 'string', 'message.content string or null');
    assert.ok('refusal' in c.message && c.message.refusal === null, `message.refusal is null: ${JSON.stringify(c.message)}`);
    assert.ok('logprobs' in c, 'choices[0].logprobs present');
    assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), `finish_reason ${JSON.stringify(c.finish_reason)}`);
    assertOpenAIUsage(body.usage);
    return c;
}

// The chunks of a chat completion stream (parsed JSON, without [DONE]): every
// field on every chunk, role first, finish_reason null until the last choice
// chunk, the usage chunk last when asked. Returns the assembled
// { content, reasoning, toolCalls, finish, usage, role }.
export function assertChatChunks(chunks, { includeUsage = false, model = SERVED } = {}) {
    assert.ok(chunks.length >= 2, `at least two chunks, got ${chunks.length}`);
    chunks.forEach((ch, i) => assertSchema(ch, 'ChatCompletionChunk', `chunk ${i}`));
    const id = chunks[0].id;
    const created = chunks[0].created;
    assert.equal(typeof id, 'string');
    assert.ok(id.startsWith('chatcmpl-'), `chunk id ${JSON.stringify(id)} starts with chatcmpl-`);
    assertUnixSeconds(created, 'chunk created');
    let choiceChunks = chunks;
    let usage = null;
    if (includeUsage) {
        const last = chunks[chunks.length - 1];
        assert.deepEqual(last.choices, [], `the usage chunk has choices: [] (${JSON.stringify(last)})`);
        assertOpenAIUsage(last.usage, 'usage chunk');
        usage = last.usage;
        choiceChunks = chunks.slice(0, -1);
    }
    const out = { content: '', reasoning: '', toolCalls: [], finish: null, usage, role: null };
    const seenTool = new Set();
    choiceChunks.forEach((ch, i) => {
        const where = `chunk ${i} ${JSON.stringify(ch)}`;
        assert.equal(ch.id, id, `same id on every chunk: ${where}`);
        assert.equal(ch.created, created, `same created on every chunk: ${where}`);
        assert.equal(ch.object, 'chat.completion.chunk', where);
        assert.equal(ch.model, model, `model is the served name: ${where}`);
        if (includeUsage) assert.ok('usage' in ch && ch.usage === null, `usage: null on every chunk but the last: ${where}`);
        else assert.ok(ch.usage === undefined || ch.usage === null, `no usage without include_usage: ${where}`);
        assert.ok(Array.isArray(ch.choices) && ch.choices.length === 1, `one choice: ${where}`);
        const c = ch.choices[0];
        assert.equal(c.index, 0, `choices[0].index: ${where}`);
        assert.ok(c.delta && typeof c.delta === 'object', `delta: ${where}`);
        assert.ok('finish_reason' in c, `finish_reason present: ${where}`);
        if (i === 0) assert.equal(c.delta.role, 'assistant', `the first delta carries the role: ${where}`);
        if (c.delta.role !== undefined) out.role = c.delta.role;
        if (i < choiceChunks.length - 1) assert.equal(c.finish_reason, null, `finish_reason null before the last chunk: ${where}`);
        else assert.ok(typeof c.finish_reason === 'string', `finish_reason on the last chunk: ${where}`);
        if (typeof c.delta.content === 'string') out.content += c.delta.content;
        if (typeof c.delta.reasoning_content === 'string') out.reasoning += c.delta.reasoning_content;
        for (const tc of c.delta.tool_calls || []) {
            assert.ok(isInt(tc.index), `tool call delta has an index: ${where}`);
            if (!seenTool.has(tc.index)) {
                seenTool.add(tc.index);
                assert.ok(typeof tc.id === 'string' && tc.id.length > 0, `first fragment of tool call ${tc.index} has an id: ${where}`);
                assert.equal(tc.type, 'function', `first fragment of tool call ${tc.index} has type: ${where}`);
                assert.ok(tc.function && typeof tc.function.name === 'string' && tc.function.name.length > 0,
                    `first fragment of tool call ${tc.index} has function.name: ${where}`);
                out.toolCalls[tc.index] = { id: tc.id, name: tc.function.name, arguments: '' };
            } else if (tc.id !== undefined && tc.id !== null) {
                assert.equal(tc.id, out.toolCalls[tc.index].id, `a later fragment does not change the id: ${where}`);
            }
            if (tc.function && typeof tc.function.arguments === 'string') out.toolCalls[tc.index].arguments += tc.function.arguments;
        }
        out.finish = c.finish_reason;
    });
    return out;
}

// Parses a tool call's arguments string: a JSON object.
export function parseArgs(s, what = 'arguments') {
    assert.equal(typeof s, 'string', `${what} is a string`);
    let v;
    try {
        v = JSON.parse(s);
    } catch (e) {
        assert.fail(`${what} is not JSON (${e.message}): ${s}`);
    }
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), `${what} is a JSON object: ${s}`);
    return v;
}

// A stop string taken from a greedy reply: 3 characters from about a third in,
// not whitespace only. Returns { stop, expected } where expected is the reply up
// to the stop string's first occurrence.
export function pickStop(text) {
    for (let k = Math.floor(text.length / 3); k + 3 <= text.length; k++) {
        const stop = text.slice(k, k + 3);
        if (stop.trim().length === 0) continue;
        const at = text.indexOf(stop);
        if (at <= 0) continue;
        return { stop, expected: text.slice(0, at) };
    }
    throw new Error(`no usable stop string in ${JSON.stringify(text)}`);
}

// Anthropic usage: input/output tokens and the cache counters. As in Anthropic's API,
// input_tokens counts only the prompt tokens read from no cache: the whole prompt is
// input_tokens + cache_creation_input_tokens + cache_read_input_tokens (inputTotal).
export function assertAnthropicUsage(u, what = 'usage') {
    assert.ok(u && typeof u === 'object', `${what} missing`);
    assert.ok(isInt(u.input_tokens) && u.input_tokens >= 0, `${what}.input_tokens: ${JSON.stringify(u)}`);
    assert.ok(inputTotal(u) > 0, `${what}: some input: ${JSON.stringify(u)}`);
    assert.ok(isInt(u.output_tokens) && u.output_tokens >= 0, `${what}.output_tokens: ${JSON.stringify(u)}`);
    assert.ok(isInt(u.cache_read_input_tokens) && u.cache_read_input_tokens >= 0,
        `${what}.cache_read_input_tokens: ${JSON.stringify(u)}`);
    assert.ok(u.cache_creation_input_tokens === null || isInt(u.cache_creation_input_tokens),
        `${what}.cache_creation_input_tokens: ${JSON.stringify(u)}`);
}

export const inputTotal = (u) => u.input_tokens + (u.cache_creation_input_tokens || 0) + (u.cache_read_input_tokens || 0);

// A non-streaming Anthropic message body.
export function assertAnthropicMessage(m, { model = SERVED } = {}) {
    assert.equal(typeof m.id, 'string');
    assert.ok(m.id.startsWith('msg_'), `id ${JSON.stringify(m.id)} starts with msg_`);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, model, 'model is the served name');
    assert.ok(Array.isArray(m.content), 'content is an array');
    for (const b of m.content) {
        if (b.type === 'text') assert.equal(typeof b.text, 'string', `text block: ${JSON.stringify(b)}`);
        else if (b.type === 'thinking') assert.equal(typeof b.thinking, 'string', `thinking block: ${JSON.stringify(b)}`);
        else if (b.type === 'tool_use') {
            assert.ok(typeof b.id === 'string' && b.id.length > 0, `tool_use.id: ${JSON.stringify(b)}`);
            assert.equal(typeof b.name, 'string');
            assert.ok(b.input && typeof b.input === 'object' && !Array.isArray(b.input), `tool_use.input object: ${JSON.stringify(b)}`);
        } else assert.fail(`unexpected content block ${JSON.stringify(b)}`);
    }
    assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
    assert.ok('stop_sequence' in m, 'stop_sequence present');
    if (m.stop_reason !== 'stop_sequence') assert.equal(m.stop_sequence, null, 'stop_sequence null');
    assertAnthropicUsage(m.usage);
}

export const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

// The frames of an Anthropic stream (from parseSSE): an event line on every frame
// naming the data's type, message_start first, blocks opened/filled/closed in index
// order, message_delta then message_stop last. Returns the assembled message
// { start, blocks: [{type, text|thinking|partial_json|..., start}], delta, usage }.
export function assertAnthropicFrames(frames, { model = SERVED } = {}) {
    const events = frames.filter((f) => f.event !== 'ping');
    for (const f of frames) {
        assert.ok(f.event !== null, `every frame has an event: line (frame ${JSON.stringify(f.raw)})`);
        assert.ok(f.json, `frame data is JSON: ${f.raw}`);
        assert.equal(f.json.type, f.event, `data.type equals the event name: ${f.raw}`);
    }
    assert.ok(events.length >= 3, `at least message_start, message_delta, message_stop: ${frames.map((f) => f.event)}`);
    assert.equal(events[0].event, 'message_start', 'the first event is message_start');
    const start = events[0].json.message;
    assert.ok(start && start.type === 'message' && start.role === 'assistant', `message_start.message: ${events[0].raw}`);
    assert.ok(typeof start.id === 'string' && start.id.startsWith('msg_'), `message id: ${events[0].raw}`);
    assert.equal(start.model, model);
    assert.deepEqual(start.content, [], 'message_start has empty content');
    assert.equal(start.stop_reason, null, 'message_start stop_reason null');
    assert.ok(start.usage && isInt(start.usage.input_tokens), `message_start usage.input_tokens: ${events[0].raw}`);
    assert.equal(events[events.length - 1].event, 'message_stop', 'the last event is message_stop');
    assert.equal(events[events.length - 2].event, 'message_delta', 'message_delta comes just before message_stop');
    const md = events[events.length - 2].json;
    assert.ok(md.delta && typeof md.delta.stop_reason === 'string', `message_delta.delta.stop_reason: ${events[events.length - 2].raw}`);
    assert.ok('stop_sequence' in md.delta, 'message_delta.delta.stop_sequence present');
    assert.ok(md.usage && isInt(md.usage.output_tokens), `message_delta.usage.output_tokens: ${events[events.length - 2].raw}`);
    assert.ok(isInt(md.usage.cache_read_input_tokens), `message_delta.usage.cache_read_input_tokens: ${events[events.length - 2].raw}`);
    const blocks = [];
    let open = null;
    for (const f of events.slice(1, -2)) {
        const d = f.json;
        if (f.event === 'content_block_start') {
            assert.equal(open, null, `a block starts while block ${open} is open: ${f.raw}`);
            assert.equal(d.index, blocks.length, `block indexes count up from 0: ${f.raw}`);
            const b = d.content_block;
            assert.ok(b && typeof b.type === 'string', f.raw);
            if (b.type === 'text') assert.equal(b.text, '', `a text block starts empty: ${f.raw}`);
            if (b.type === 'thinking') assert.equal(b.thinking, '', `a thinking block starts empty: ${f.raw}`);
            if (b.type === 'tool_use') {
                assert.ok(typeof b.id === 'string' && b.id.length > 0 && typeof b.name === 'string', `tool_use start: ${f.raw}`);
                assert.deepEqual(b.input, {}, `tool_use starts with input {}: ${f.raw}`);
            }
            blocks.push({ type: b.type, start: b, text: '', thinking: '', partial_json: '', signature: '' });
            open = d.index;
        } else if (f.event === 'content_block_delta') {
            assert.equal(d.index, open, `delta for the open block: ${f.raw}`);
            const b = blocks[open];
            const t = d.delta && d.delta.type;
            if (t === 'text_delta') {
                assert.equal(b.type, 'text', f.raw);
                b.text += d.delta.text;
            } else if (t === 'thinking_delta') {
                assert.equal(b.type, 'thinking', f.raw);
                b.thinking += d.delta.thinking;
            } else if (t === 'signature_delta') {
                assert.equal(b.type, 'thinking', f.raw);
                b.signature = d.delta.signature;
            } else if (t === 'input_json_delta') {
                assert.equal(b.type, 'tool_use', f.raw);
                assert.equal(typeof d.delta.partial_json, 'string', f.raw);
                b.partial_json += d.delta.partial_json;
            } else assert.fail(`unknown delta type: ${f.raw}`);
        } else if (f.event === 'content_block_stop') {
            assert.equal(d.index, open, `stop for the open block: ${f.raw}`);
            open = null;
        } else {
            assert.fail(`unexpected event ${f.event} between message_start and message_delta: ${f.raw}`);
        }
    }
    assert.equal(open, null, 'every block is closed before message_delta');
    return { start, blocks, delta: md.delta, usage: md.usage };
}

// The Responses API: a response object, and its event stream.
export function assertResponse(r) {
    assertSchema(r, 'Response');
    assert.equal(typeof r.id, 'string');
    assert.ok(r.id.startsWith('resp_'), `id ${JSON.stringify(r.id)} starts with resp_`);
    assert.equal(r.object, 'response');
    assertUnixSeconds(r.created_at, 'created_at');
    assert.equal(r.model, SERVED);
    assert.ok(['completed', 'incomplete'].includes(r.status), `status ${r.status}`);
    assert.ok(Array.isArray(r.output) && r.output.length >= 1, `output: ${JSON.stringify(r.output)}`);
    for (const item of r.output) {
        const w = JSON.stringify(item);
        assert.equal(typeof item.id, 'string', `item id: ${w}`);
        if (item.type === 'message') {
            assert.equal(item.role, 'assistant', w);
            assert.ok(Array.isArray(item.content), w);
            for (const part of item.content) {
                assert.equal(part.type, 'output_text', w);
                assert.equal(typeof part.text, 'string', w);
                assert.ok(Array.isArray(part.annotations), `output_text.annotations: ${w}`);
            }
        } else if (item.type === 'function_call') {
            assert.ok(typeof item.call_id === 'string' && item.call_id.length > 0, `call_id: ${w}`);
            assert.equal(typeof item.name, 'string', w);
            assert.equal(typeof item.arguments, 'string', w);
        } else {
            assert.equal(item.type, 'reasoning', `output item type: ${w}`);
        }
    }
    const u = r.usage;
    assert.ok(u && isInt(u.input_tokens) && u.input_tokens > 0 && isInt(u.output_tokens), `usage: ${JSON.stringify(u)}`);
    assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
    assertSchema(u, 'ResponseUsage', 'usage'); // in a finished response: present, with every detail
    assert.ok(u.input_tokens_details.cached_tokens <= u.input_tokens, `cached_tokens <= input_tokens: ${JSON.stringify(u)}`);
}

export const messageText = (r) =>
    r.output.filter((i) => i.type === 'message').flatMap((i) => i.content.map((p) => p.text)).join('');
export const functionCalls = (r) => r.output.filter((i) => i.type === 'function_call');

// Checks a Responses event stream (SSE frames) and rebuilds its items from the
// deltas. Returns { types, items: [{item, parts: [{type, text}], text, args}], completed }
// where text is a message item's output_text.
export function checkResponseEvents(frames) {
    const types = frames.map((f) => f.json && f.json.type);
    let seq = -Infinity;
    for (const f of frames) {
        assert.ok(f.json, `frame data is JSON: ${f.raw}`);
        assert.equal(f.event, f.json.type, `the event: line names the data's type: ${f.raw}`);
        assert.ok(isInt(f.json.sequence_number), `sequence_number: ${f.raw}`);
        assert.ok(f.json.sequence_number > seq, `sequence_number increases: ${f.raw}`);
        seq = f.json.sequence_number;
        assertSchema(f.json, 'ResponseStreamEvent', `event ${f.json.type}`);
        assert.ok(!['error', 'response.failed'].includes(f.json.type), `no error events: ${f.raw}`);
    }
    assert.equal(types[0], 'response.created', `first event: ${types}`);
    assert.equal(types[types.length - 1], 'response.completed', `last event: ${types}`);
    const created = frames[0].json.response;
    assert.ok(created && created.id.startsWith('resp_'), `response.created.response: ${frames[0].raw}`);
    const items = [];
    const byId = (ev) => {
        const it = items[ev.output_index];
        assert.ok(it, `an item at output_index ${ev.output_index}: ${JSON.stringify(ev)}`);
        if (ev.item_id !== undefined) assert.equal(ev.item_id, it.item.id, `item_id matches the added item: ${JSON.stringify(ev)}`);
        assert.ok(!it.done, `event after output_item.done: ${JSON.stringify(ev)}`);
        return it;
    };
    for (const f of frames.slice(1, -1)) {
        const ev = f.json;
        switch (ev.type) {
            case 'response.in_progress':
                break;
            case 'response.output_item.added':
                assert.equal(ev.output_index, items.length, `items added in order: ${f.raw}`);
                assert.equal(typeof ev.item.id, 'string', f.raw);
                if (ev.item.type === 'function_call') assert.equal(ev.item.arguments, '', `arguments start empty: ${f.raw}`);
                items.push({ item: ev.item, parts: [], args: '', done: false });
                break;
            case 'response.content_part.added': {
                const it = byId(ev);
                assert.equal(ev.content_index, it.parts.length, `content parts added in order: ${f.raw}`);
                const want = it.item.type === 'reasoning' ? 'reasoning_text' : 'output_text';
                assert.equal(ev.part && ev.part.type, want, `a ${it.item.type} item's part is ${want}: ${f.raw}`);
                it.parts.push({ type: ev.part.type, text: '', done: false });
                break;
            }
            case 'response.output_text.delta':
            case 'response.reasoning_text.delta': {
                const it = byId(ev);
                const part = it.parts[ev.content_index];
                assert.ok(part && !part.done, `a delta for an open content part: ${f.raw}`);
                const want = ev.type === 'response.output_text.delta' ? 'output_text' : 'reasoning_text';
                assert.equal(part.type, want, `${ev.type} goes to a ${want} part: ${f.raw}`);
                assert.equal(typeof ev.delta, 'string');
                part.text += ev.delta;
                break;
            }
            case 'response.output_text.done':
            case 'response.reasoning_text.done': {
                const part = byId(ev).parts[ev.content_index];
                assert.ok(part, f.raw);
                assert.equal(ev.text, part.text, `${ev.type}.text == the deltas: ${f.raw}`);
                break;
            }
            case 'response.content_part.done': {
                const part = byId(ev).parts[ev.content_index];
                assert.ok(part, f.raw);
                assert.equal(ev.part.text, part.text, `content_part.done text == the deltas: ${f.raw}`);
                part.done = true;
                break;
            }
            case 'response.function_call_arguments.delta': {
                const it = byId(ev);
                assert.equal(it.item.type, 'function_call', f.raw);
                it.args += ev.delta;
                break;
            }
            case 'response.function_call_arguments.done':
                assert.equal(ev.arguments, byId(ev).args, f.raw);
                break;
            case 'response.output_item.done': {
                const it = byId(ev);
                assert.equal(ev.item.id, it.item.id, f.raw);
                assert.equal(ev.item.type, it.item.type, f.raw);
                if (ev.item.type === 'message' || ev.item.type === 'reasoning') {
                    const streamed = it.parts.map((p) => p.text);
                    assert.deepEqual((ev.item.content || []).map((p) => p.text), streamed, `done item content == the deltas: ${f.raw}`);
                    assert.ok(it.parts.every((p) => p.done), `content_part.done for every part before output_item.done: ${f.raw}`);
                }
                if (ev.item.type === 'function_call') {
                    assert.equal(ev.item.arguments, it.args, `done item arguments == the deltas: ${f.raw}`);
                    assert.equal(ev.item.name, it.item.name, f.raw);
                    assert.equal(ev.item.call_id, it.item.call_id, f.raw);
                }
                it.item = ev.item;
                it.done = true;
                break;
            }
            default:
                // Other documented events (reasoning summaries, ...) may come; they are not checked here.
                break;
        }
    }
    for (const it of items) {
        assert.ok(it.done, `output_item.done for every item: ${JSON.stringify(it.item)}`);
        it.text = it.parts.filter((p) => p.type === 'output_text').map((p) => p.text).join('');
    }
    const completed = frames[frames.length - 1].json.response;
    assertResponse(completed);
    assert.equal(completed.id, created.id, 'one response id throughout');
    assert.equal(completed.output.length, items.length, 'response.completed lists every streamed item');
    completed.output.forEach((o, i) => assert.equal(o.id, items[i].item.id));
    return { types, items, completed };
}

// Whether s can still become one JSON object: whitespace, then an object that is
// valid as far as it goes (what a JSON-constrained decoder guarantees at every
// token, whatever the model). A pushdown recognizer over characters.
export function isJsonObjectPrefix(s) {
    const WS = ' \t\n\r';
    const stack = []; // '{' or '['
    let state = 'start'; // start, value, value_or_close, key_or_close, key, colon, after, string, number, literal, done
    let key = false; // the string being read is a key
    let esc = 0; // 0: none, 1: after backslash, 2..5: hex digits left + 1
    let num = ''; // number sub-state: sign, zero, int, dot, frac, e, esign, exp
    let lit = ''; // the rest of true/false/null to read
    const endValue = () => {
        state = stack.length ? 'after' : 'done';
    };
    for (let i = 0; i < s.length; i++) {
        const c = s[i];
        switch (state) {
            case 'start':
                if (WS.includes(c)) break;
                if (c !== '{') return false;
                stack.push('{');
                state = 'key_or_close';
                break;
            case 'done':
                if (!WS.includes(c)) return false;
                break;
            case 'key_or_close':
            case 'key':
                if (WS.includes(c)) break;
                if (c === '}' && state === 'key_or_close') {
                    stack.pop();
                    endValue();
                } else if (c === '"') {
                    state = 'string';
                    key = true;
                } else return false;
                break;
            case 'colon':
                if (WS.includes(c)) break;
                if (c !== ':') return false;
                state = 'value';
                break;
            case 'value':
            case 'value_or_close':
                if (WS.includes(c)) break;
                if (c === ']' && state === 'value_or_close') {
                    stack.pop();
                    endValue();
                } else if (c === '{') {
                    stack.push('{');
                    state = 'key_or_close';
                } else if (c === '[') {
                    stack.push('[');
                    state = 'value_or_close';
                } else if (c === '"') {
                    state = 'string';
                    key = false;
                } else if (c === '-' || (c >= '0' && c <= '9')) {
                    state = 'number';
                    num = c === '-' ? 'sign' : c === '0' ? 'zero' : 'int';
                } else if ('tfn'.includes(c)) {
                    state = 'literal';
                    lit = { t: 'rue', f: 'alse', n: 'ull' }[c];
                } else return false;
                break;
            case 'after':
                if (WS.includes(c)) break;
                if (c === ',') state = stack[stack.length - 1] === '{' ? 'key' : 'value';
                else if ((c === '}' && stack[stack.length - 1] === '{') || (c === ']' && stack[stack.length - 1] === '[')) {
                    stack.pop();
                    endValue();
                } else return false;
                break;
            case 'string':
                if (esc === 1) {
                    if (c === 'u') esc = 5;
                    else if ('"\\/bfnrt'.includes(c)) esc = 0;
                    else return false;
                } else if (esc > 1) {
                    if (!/[0-9a-fA-F]/.test(c)) return false;
                    esc = esc === 2 ? 0 : esc - 1;
                } else if (c === '\\') esc = 1;
                else if (c === '"') {
                    if (key) state = 'colon';
                    else endValue();
                } else if (c.charCodeAt(0) < 0x20) return false;
                break;
            case 'literal':
                if (c !== lit[0]) return false;
                lit = lit.slice(1);
                if (lit === '') endValue();
                break;
            case 'number': {
                const d = c >= '0' && c <= '9';
                const next = {
                    sign: d ? (c === '0' ? 'zero' : 'int') : null,
                    zero: c === '.' ? 'dot' : c === 'e' || c === 'E' ? 'e' : null,
                    int: d ? 'int' : c === '.' ? 'dot' : c === 'e' || c === 'E' ? 'e' : null,
                    dot: d ? 'frac' : null,
                    frac: d ? 'frac' : c === 'e' || c === 'E' ? 'e' : null,
                    e: d ? 'exp' : c === '+' || c === '-' ? 'esign' : null,
                    esign: d ? 'exp' : null,
                    exp: d ? 'exp' : null,
                }[num];
                if (next) {
                    num = next;
                    break;
                }
                if (!['zero', 'int', 'frac', 'exp'].includes(num)) return false;
                endValue();
                i--; // the character after the number is read again
                break;
            }
            default:
                return false;
        }
    }
    return true;
}
