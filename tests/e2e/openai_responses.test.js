// openai_responses.test.js - POST /v1/responses (what Codex calls) through the SDK
// (responses.create / responses.stream) and on the wire: input as a string and as
// items, instructions, function tools and function_call / function_call_output
// items, the streaming event sequence, 400 for previous_response_id.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { assertResponse, checkResponseEvents, functionCalls, messageText, parseArgs } from './checks.js';
import {
    PROMPTS,
    RESPONSES_TOOLS,
    SERVED,
    PENDING,
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

describe('OpenAI Responses API', { skip: SKIP || PENDING.responses }, () => {
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

    test('a Codex second turn: the reasoning, function_call and function_call_output items sent back', T, async () => {
        const first = await client.responses.create(base({ input: PROMPTS.tool, tools: RESPONSES_TOOLS }));
        const call = functionCalls(first)[0];
        assert.ok(call, `a function call in the first turn: ${JSON.stringify(first.output)}`);
        // The first turn's output items go back as input, as a stateless client does.
        const input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: PROMPTS.tool }] }];
        for (const item of first.output) input.push(item);
        input.push({ type: 'reasoning', id: 'rs_extra', summary: [], encrypted_content: 'opaque' });
        input.push({ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 22 C' });
        const second = await client.responses.create(
            base({ input, tools: RESPONSES_TOOLS, store: false, include: ['reasoning.encrypted_content'], max_output_tokens: 16 }),
        );
        assertResponse(second);
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
