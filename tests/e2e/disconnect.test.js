// disconnect.test.js - a client that goes away mid-stream cancels its generation:
// start a long stream, read a few chunks, destroy the socket, then /metrics must
// show one more cancelled request, nothing running and the generated-token count
// standing still (polled with a generous deadline; nothing is timed).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
    PROMPTS,
    SERVED,
    PENDING,
    SKIP,
    TIMEOUT,
    assertHealthy,
    generationCounters,
    openStream,
    readFrames,
    request,
    sharedServer,
    stopSharedServer,
    waitCancelled,
} from './harness.js';

const T = { timeout: TIMEOUT };

describe('client disconnect cancels the generation', { skip: SKIP }, () => {
    let server;
    before(async () => {
        server = await sharedServer();
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    const readCounters = () => generationCounters(server);

    async function disconnectCase(path, body, headers = {}) {
        const before0 = await readCounters();
        assert.equal(before0.running, 0, 'nothing running before the test');
        const { req, res } = await openStream(server, path, body, headers);
        assert.equal(res.statusCode, 200);
        await readFrames(res, 4);
        const during = await readCounters();
        assert.ok(during.running >= 1, `the stream is running: ${JSON.stringify(during)}`);
        req.destroy();
        res.destroy();
        // The count of cancelled requests rises, nothing more is generated for it.
        await waitCancelled(server, before0);
        await assertHealthy(server);
        const r = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: { model: SERVED, messages: [{ role: 'user', content: PROMPTS.short }], max_tokens: 4 },
        });
        assert.equal(r.status, 200, 'the next request is served');
    }

    test('OpenAI chat stream', T, () =>
        disconnectCase('/v1/chat/completions', {
            model: SERVED,
            messages: [{ role: 'user', content: PROMPTS.endless }],
            max_tokens: 4000,
            temperature: 0,
            stream: true,
        }));

    test('Anthropic messages stream', { ...T, skip: PENDING.anthropic }, () =>
        disconnectCase(
            '/v1/messages',
            { model: SERVED, messages: [{ role: 'user', content: PROMPTS.endless }], max_tokens: 4000, temperature: 0, stream: true },
            { 'anthropic-version': '2023-06-01' },
        ));

    test('Responses stream', { ...T, skip: PENDING.responses }, () =>
        disconnectCase('/v1/responses', { model: SERVED, input: PROMPTS.endless, max_output_tokens: 4000, temperature: 0, stream: true }));
});
