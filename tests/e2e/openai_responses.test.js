// openai_responses.test.js - POST /v1/responses (what Codex calls) through the SDK
// (responses.create / responses.stream) and on the wire: input as a string and as
// items, instructions, function tools and function_call / function_call_output
// items, the streaming event sequence, 400 for previous_response_id.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { assertUnixSeconds, isInt, parseArgs } from './checks.js';
import {
    PROMPTS,
    RESPONSES_TOOLS,
    SERVED,
    SKIP,
    TIMEOUT,
    assertHealthy,
    openaiClient,
    openaiErrorShape,
    postSSE,
    request,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

function assertResponse(r) {
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
    assert.ok(u.input_tokens_details && isInt(u.input_tokens_details.cached_tokens), `input_tokens_details.cached_tokens: ${JSON.stringify(u)}`);
}

const messageText = (r) =>
    r.output.filter((i) => i.type === 'message').flatMap((i) => i.content.map((p) => p.text)).join('');
const functionCalls = (r) => r.output.filter((i) => i.type === 'function_call');

// Checks a Responses event stream (SSE frames) and rebuilds its items from the
// deltas. Returns { events, items: [{item, text, args}], completed }.
function checkResponseEvents(frames) {
    const types = frames.map((f) => f.json && f.json.type);
    let seq = -Infinity;
    for (const f of frames) {
        assert.ok(f.json, `frame data is JSON: ${f.raw}`);
        assert.equal(f.event, f.json.type, `the event: line names the data's type: ${f.raw}`);
        assert.ok(isInt(f.json.sequence_number), `sequence_number: ${f.raw}`);
        assert.ok(f.json.sequence_number > seq, `sequence_number increases: ${f.raw}`);
        seq = f.json.sequence_number;
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
                items.push({ item: ev.item, text: '', args: '', parts: 0, done: false });
                break;
            case 'response.content_part.added': {
                const it = byId(ev);
                assert.equal(ev.content_index, it.parts, f.raw);
                it.parts++;
                break;
            }
            case 'response.output_text.delta': {
                const it = byId(ev);
                assert.equal(it.item.type, 'message', f.raw);
                assert.ok(ev.content_index < it.parts, `text delta before content_part.added: ${f.raw}`);
                assert.equal(typeof ev.delta, 'string');
                it.text += ev.delta;
                break;
            }
            case 'response.output_text.done':
                assert.equal(ev.text, byId(ev).text, `output_text.done.text == the deltas: ${f.raw}`);
                break;
            case 'response.content_part.done':
                assert.equal(ev.part.text, byId(ev).text, f.raw);
                break;
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
                if (ev.item.type === 'message') assert.equal(ev.item.content.map((p) => p.text).join(''), it.text, f.raw);
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
    for (const it of items) assert.ok(it.done, `output_item.done for every item: ${JSON.stringify(it.item)}`);
    const completed = frames[frames.length - 1].json.response;
    assertResponse(completed);
    assert.equal(completed.id, created.id, 'one response id throughout');
    assert.equal(completed.output.length, items.length, 'response.completed lists every streamed item');
    completed.output.forEach((o, i) => assert.equal(o.id, items[i].item.id));
    return { types, items, completed };
}

describe('OpenAI Responses API', { skip: SKIP }, () => {
    let server;
    let client;
    before(async () => {
        server = await sharedServer();
        client = openaiClient(server);
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    const base = (extra) => ({ model: SERVED, temperature: 0, max_output_tokens: 64, ...extra });

    test('create: input string and instructions → a completed response with one message', T, async () => {
        const r = await client.responses.create(base({ input: PROMPTS.short, instructions: 'Answer briefly.' }));
        assertResponse(r);
        assert.equal(r.status, 'completed');
        const text = messageText(r);
        assert.ok(text.length > 0, 'some text');
        assert.equal(r.output_text, text, 'the SDK output_text helper');
    });

    test('input as items equals input as a string (greedy)', T, async () => {
        const a = await client.responses.create(base({ input: PROMPTS.short }));
        const b = await client.responses.create(
            base({ input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: PROMPTS.short }] }] }),
        );
        const c = await client.responses.create(base({ input: [{ role: 'user', content: PROMPTS.short }] }));
        assert.equal(messageText(b), messageText(a));
        assert.equal(messageText(c), messageText(a));
        assert.equal(b.usage.input_tokens, a.usage.input_tokens);
    });

    test('max_output_tokens reached → status incomplete, reason max_output_tokens', T, async () => {
        const r = await client.responses.create(base({ input: PROMPTS.endless, max_output_tokens: 16 }));
        assertResponse(r);
        assert.equal(r.status, 'incomplete');
        assert.equal(r.incomplete_details && r.incomplete_details.reason, 'max_output_tokens');
        assert.equal(r.usage.output_tokens, 16);
    });

    test('function tools → a function_call item; function_call_output round trip', T, async () => {
        const r = await client.responses.create(base({ input: PROMPTS.tool, tools: RESPONSES_TOOLS }));
        assertResponse(r);
        const calls = functionCalls(r);
        assert.ok(calls.length >= 1, `a function_call item: ${JSON.stringify(r.output)}`);
        assert.equal(calls[0].name, 'get_weather');
        assert.equal(typeof parseArgs(calls[0].arguments).city, 'string');

        const r2 = await client.responses.create(
            base({
                input: [
                    { role: 'user', content: PROMPTS.tool },
                    { type: 'function_call', call_id: calls[0].call_id, name: calls[0].name, arguments: calls[0].arguments },
                    { type: 'function_call_output', call_id: calls[0].call_id, output: 'Sunny, 22 C' },
                ],
                tools: RESPONSES_TOOLS,
                max_output_tokens: 16,
            }),
        );
        assertResponse(r2);
    });

    test('stream of text: created, output_item.added, output_text.delta, output_item.done, completed', T, async () => {
        const req = base({ input: PROMPTS.short, instructions: 'Answer briefly.' });
        const ref = await client.responses.create(req);
        const res = await postSSE(server, '/v1/responses', { ...req, stream: true });
        const { types, items, completed } = checkResponseEvents(res.frames);
        for (const t of ['response.created', 'response.output_item.added', 'response.output_text.delta', 'response.output_item.done', 'response.completed'])
            assert.ok(types.includes(t), `${t} among ${types}`);
        const text = items.filter((i) => i.item.type === 'message').map((i) => i.text).join('');
        assert.equal(text, messageText(ref), 'streamed text == non-stream text');
        assert.equal(messageText(completed), text);

        // The SDK's stream helper.
        const stream = client.responses.stream(req);
        let deltas = '';
        stream.on('response.output_text.delta', (e) => {
            deltas += e.delta;
        });
        const final = await stream.finalResponse();
        assert.equal(deltas, text);
        assert.equal(final.output_text, ref.output_text);
    });

    test('stream of a function call: function_call_arguments.delta assembles the non-stream arguments', T, async () => {
        const req = base({ input: PROMPTS.tool, tools: RESPONSES_TOOLS });
        const ref = functionCalls(await client.responses.create(req));
        const res = await postSSE(server, '/v1/responses', { ...req, stream: true });
        const { types, items } = checkResponseEvents(res.frames);
        assert.ok(types.includes('response.function_call_arguments.delta'), `function_call_arguments.delta among ${types}`);
        const calls = items.filter((i) => i.item.type === 'function_call');
        assert.equal(calls.length, ref.length);
        assert.equal(calls[0].item.name, ref[0].name);
        assert.deepEqual(parseArgs(calls[0].args), parseArgs(ref[0].arguments));

        const final = await client.responses.stream(req).finalResponse();
        const fc = functionCalls(final);
        assert.equal(fc[0].name, 'get_weather');
        assert.deepEqual(parseArgs(fc[0].arguments), parseArgs(ref[0].arguments));
    });

    test('a request shaped as Codex sends it (developer item, store false, include, tool_choice) streams to completion', T, async () => {
        const res = await postSSE(server, '/v1/responses', {
            model: SERVED,
            instructions: 'You are a coding agent.',
            input: [
                { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'Work in /tmp.' }] },
                { type: 'message', role: 'user', content: [{ type: 'input_text', text: PROMPTS.tool }] },
            ],
            tools: RESPONSES_TOOLS,
            tool_choice: 'auto',
            parallel_tool_calls: false,
            reasoning: null,
            store: false,
            stream: true,
            include: [],
            prompt_cache_key: 'e2e-session',
            max_output_tokens: 64,
            temperature: 0,
        });
        const { completed } = checkResponseEvents(res.frames);
        assert.ok(['completed', 'incomplete'].includes(completed.status));
    });

    test('previous_response_id → 400 naming it (the server is stateless)', T, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/responses',
            body: base({ input: PROMPTS.short, previous_response_id: 'resp_123' }),
        });
        assert.equal(res.status, 400, res.text);
        const body = res.json();
        assert.equal(openaiErrorShape(body), null);
        assert.match(body.error.message, /previous_response_id/);
        await assert.rejects(
            client.responses.create(base({ input: PROMPTS.short, previous_response_id: 'resp_123' })),
            (e) => e.status === 400,
        );
    });
});
