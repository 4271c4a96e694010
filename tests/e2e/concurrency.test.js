// concurrency.test.js - 16 streaming clients at once (8 through the openai SDK, 8
// through @anthropic-ai/sdk, four prompts; all 16 through openai while the server
// answers /v1/messages with 501): every stream completes and each gets, greedy,
// exactly the text it gets alone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { textOf } from './checks.js';
import {
    PROMPTS,
    SERVED,
    PENDING,
    SKIP,
    TIMEOUT,
    anthropicClient,
    assertHealthy,
    metricSum,
    metrics,
    openaiClient,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

const PROMPT_SET = [PROMPTS.short, PROMPTS.endless, 'Count to one thousand.', 'def fib(n):'];
const MAX = 24;

describe('16 concurrent streaming clients', { skip: SKIP }, () => {
    let server;
    before(async () => {
        server = await sharedServer();
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    test('all complete, each with the text it gets alone', T, async (t) => {
        const oa = openaiClient(server);
        const an = anthropicClient(server);
        const oaReq = (p) => ({ model: SERVED, messages: [{ role: 'user', content: p }], max_tokens: MAX, temperature: 0 });
        const anReq = (p) => ({ model: SERVED, messages: [{ role: 'user', content: p }], max_tokens: MAX, temperature: 0 });

        // Alone, one after the other.
        const aloneOA = [];
        const aloneAN = [];
        for (const p of PROMPT_SET) {
            const r = await oa.chat.completions.create(oaReq(p));
            aloneOA.push({ text: r.choices[0].message.content, finish: r.choices[0].finish_reason });
            if (PENDING.anthropic) continue;
            const m = await an.messages.create(anReq(p));
            aloneAN.push({ text: textOf(m), stop: m.stop_reason });
        }

        async function oaStream(i) {
            const s = await oa.chat.completions.create({ ...oaReq(PROMPT_SET[i % 4]), stream: true });
            let text = '';
            let finish = null;
            for await (const ch of s) {
                text += ch.choices[0]?.delta?.content || '';
                finish = ch.choices[0]?.finish_reason || finish;
            }
            return { kind: 'openai', i, text, finish, want: aloneOA[i % 4] };
        }
        async function anStream(i) {
            const m = await an.messages.stream(anReq(PROMPT_SET[i % 4])).finalMessage();
            return { kind: 'anthropic', i, text: textOf(m), stop: m.stop_reason, want: aloneAN[i % 4] };
        }

        const jobs = [];
        if (PENDING.anthropic) t.diagnostic(`16 openai clients: ${PENDING.anthropic}`);
        for (let i = 0; i < 8; i++) jobs.push(oaStream(i), PENDING.anthropic ? oaStream(i + 8) : anStream(i));
        let peak = 0;
        let polling = true;
        const poller = (async () => {
            while (polling) {
                const v = metricSum(await metrics(server), /running/i);
                if (v !== null && v > peak) peak = v;
                await new Promise((r) => setTimeout(r, 20));
            }
        })();
        const results = await Promise.allSettled(jobs);
        polling = false;
        await poller;
        const failed = results.filter((r) => r.status === 'rejected');
        assert.equal(failed.length, 0, `every stream completes: ${failed.map((f) => f.reason && f.reason.message).join('; ')}`);
        for (const { value: r } of results) {
            assert.equal(r.text, r.want.text, `${r.kind} client ${r.i}: same text as alone`);
            if (r.kind === 'openai') assert.equal(r.finish, r.want.finish, `openai client ${r.i}: finish_reason`);
            else assert.equal(r.stop, r.want.stop, `anthropic client ${r.i}: stop_reason`);
        }
        // Informational: how many ran together at the peak (never asserted beyond "some").
        process.stderr.write(`concurrency: peak running requests seen in /metrics: ${peak}\n`);
    });
});
