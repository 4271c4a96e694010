// web.test.js - the web page at / in a real browser: headless Chromium (Debian's,
// /usr/bin/chromium, or $RAPID_CHROMIUM) driven by playwright-core, against the
// real server and the bundled model (whose replies are gibberish: the tests look
// at how text arrives and is shown, not at what it says).
//
// Checked: the page loads with no console error; a reply streams into the page
// over several frames; Stop (the Escape key) cancels the generation on the server
// (/metrics: one more cancelled request, nothing running, the generated count
// standing still); tool calls and reasoning shown, the last turn edited and
// regenerated, the conversation kept over a reload; what the model writes, and hostile Markdown (<script>, <img
// onerror>, javascript: links) put through the renderer and through a stored
// conversation, is shown as text and runs nothing; the Status view shows the
// figures /v1/status reports and follows them without a reload; a server with
// --api-key serves the page shell without the key and the page says clearly that
// a key is needed, and that a wrong one was refused. Screenshots of both views in
// light and dark go to web-screenshots/ beside the rapid binary (the path is
// printed). Without Chromium the file skips with a message; under CI=true that is
// a failure. Nothing downloads a browser.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
    BINARY,
    OPENAI_TOOLS,
    PROMPTS,
    SKIP,
    TIMEOUT,
    generationCounters,
    request,
    sharedServer,
    startServer,
    stopSharedServer,
    waitCancelled,
    waitFor,
} from './harness.js';

const T = { timeout: TIMEOUT };
const CHROMIUM = process.env.RAPID_CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.RAPID_WEB_SCREENSHOTS || path.join(path.dirname(BINARY), 'web-screenshots');

// The flags this machine's Chromium needs (no sandbox as root, no GPU, and none of
// its background connections, which the closed network refuses).
const FLAGS = [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
];

async function loadBrowser() {
    if (SKIP) return { skip: SKIP };
    const missing = [];
    let chromium = null;
    try {
        ({ chromium } = await import('playwright-core'));
    } catch (e) {
        missing.push(`playwright-core in tests/e2e/node_modules (run: npm ci --prefix tests/e2e): ${e.message}`);
    }
    if (!fs.existsSync(CHROMIUM)) missing.push(`Chromium at ${CHROMIUM} (apt-get install chromium, or set RAPID_CHROMIUM)`);
    if (!missing.length) return { chromium, skip: false };
    const msg = `web page tests need ${missing.join('; ')}`;
    if (process.env.CI === 'true') throw new Error(`${msg} (under CI=true that is a failure)`);
    process.stderr.write(`skipping: ${msg}\n`);
    return { skip: msg };
}

const { chromium, skip: BROWSER_SKIP } = await loadBrowser();

// Elements the chat may build from a reply (markdown.js); anything else is a leak.
const ALLOWED = new Set(
    'li div p span strong em del code pre ul ol blockquote h3 h4 h5 h6 hr br a details summary button'.split(' '),
);

describe('the web page in Chromium', { skip: BROWSER_SKIP }, () => {
    let server;
    let browser;

    before(async () => {
        server = await sharedServer();
        // launch() gives Chromium a new empty profile (--user-data-dir) of its own, removed at close.
        browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
        fs.mkdirSync(SHOTS, { recursive: true });
        process.stderr.write(`web.test.js: screenshots in ${SHOTS}\n`);
    });
    after(async () => {
        if (browser) await browser.close();
        await stopSharedServer();
    });

    // A page on url with its console errors and uncaught exceptions collected.
    async function open(url, { colorScheme = 'light', viewport = { width: 1280, height: 860 } } = {}) {
        const context = await browser.newContext({ colorScheme, viewport });
        const page = await context.newPage();
        const errors = [];
        page.on('console', (m) => {
            if (m.type() === 'error') errors.push(`console: ${m.text()}`);
        });
        page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
        await page.goto(url);
        return { page, errors, context };
    }

    async function shot(page, name) {
        const file = path.join(SHOTS, `${name}.png`);
        await page.screenshot({ path: file });
        assert.ok(fs.statSync(file).size > 1000, `${file} was written`);
    }

    const counters = () => generationCounters(server);

    // Sets max tokens and the temperature in the settings panel (greedy: the bundled
    // model's known replies, PROMPTS.endless never ending on its own).
    async function setSampling(page, maxTokens, temperature = 0) {
        await page.locator('#settings summary').click();
        await page.locator('#max_tokens').fill(String(maxTokens));
        await page.locator('#max_tokens').dispatchEvent('change');
        await page.locator('#temperature').evaluate((e, t) => {
            e.value = String(t);
            e.dispatchEvent(new Event('input'));
        }, temperature);
        await page.locator('#settings summary').click();
    }

    // The last message's DOM holds only elements the renderer makes, no handler attributes.
    async function assertTextOnly(page) {
        const found = await page.evaluate(() => {
            const out = [];
            for (const e of document.querySelectorAll('#messages *')) {
                out.push(e.tagName.toLowerCase());
                for (const a of e.attributes) if (/^on/i.test(a.name) || /javascript:/i.test(a.value)) out.push(`attr ${a.name}`);
            }
            return out;
        });
        const bad = found.filter((t) => !ALLOWED.has(t));
        assert.deepEqual(bad, [], 'the thread holds only elements the renderer makes');
    }

    test('the page loads with no console error, shows the model, and streams a reply token by token', T, async () => {
        const { page, errors } = await open(server.url);
        assert.equal(await page.title(), 'Rapid');
        await page.locator('#model-name', { hasText: 'rapid-e2e' }).waitFor();
        await setSampling(page, 4000);
        // Watch the reply's text each animation frame from before it starts, until it
        // has grown over five frames, then stop it (the bundled model is fast: a whole
        // reply may take a handful of frames).
        const seen = page.evaluate(
            () =>
                new Promise((resolve) => {
                    const lengths = [];
                    const frame = () => {
                        const b = document.querySelector('#messages li.msg.assistant:last-child .body');
                        const stop = document.getElementById('stop');
                        if (b && !stop.hidden) {
                            const n = b.textContent.length;
                            if (lengths[lengths.length - 1] !== n) lengths.push(n);
                        }
                        if (lengths.length >= 6 || (lengths.length && stop.hidden)) resolve(lengths);
                        else requestAnimationFrame(frame);
                    };
                    frame();
                }),
        );
        await page.locator('#prompt').fill(PROMPTS.endless);
        await page.locator('#prompt').press('Enter'); // the keyboard sends
        const lengths = await seen;
        await page.locator('#stop').click();
        await page.locator('#stop').waitFor({ state: 'hidden' });
        const growing = lengths.filter((n, i) => i === 0 || n > lengths[i - 1]);
        assert.ok(growing.length >= 5, `the reply grew over several frames: lengths seen ${JSON.stringify(lengths)}`);
        // A whole answer has the server's figures under it.
        await setSampling(page, 40);
        await page.locator('#prompt').fill(PROMPTS.short);
        await page.locator('#send').click();
        await page.locator('#messages li.msg.assistant:nth-child(4) .stats').waitFor();
        await page.locator('#stop').waitFor({ state: 'hidden' });
        const stats = await page.locator('#messages li.msg.assistant:last-child .stats').textContent();
        assert.match(stats, /\d+ tokens/, `the stats line: ${stats}`);
        assert.match(stats, /first token [\d.,]+ m?s/, `the stats line: ${stats}`);
        assert.match(stats, /tok\/s/, `the stats line: ${stats}`);
        await assertTextOnly(page);
        // Edit and Regenerate are offered on the last turn.
        await page.locator('#messages li.msg.user button', { hasText: 'Edit' }).waitFor();
        await page.locator('#messages li.msg.assistant:last-child button', { hasText: 'Regenerate' }).waitFor();
        await shot(page, 'chat-light');
        await page.emulateMedia({ colorScheme: 'dark' });
        await shot(page, 'chat-dark');
        await page.setViewportSize({ width: 390, height: 780 });
        await shot(page, 'chat-phone-dark');
        assert.deepEqual(errors, [], 'no console errors');
    });

    test('Stop (Escape) cancels the generation on the server', T, async () => {
        const { page, errors } = await open(server.url);
        await page.locator('#model-name', { hasText: 'rapid-e2e' }).waitFor();
        await setSampling(page, 4000);
        const before0 = await counters();
        assert.equal(before0.running, 0, 'nothing running before the test');
        await page.locator('#prompt').fill(PROMPTS.endless);
        await page.locator('#send').click();
        // At the first text (the reply would run on for 4000 tokens), stop it.
        await page.waitForFunction(() => {
            const b = document.querySelector('#messages li.msg.assistant:last-child .body');
            return b && !document.getElementById('stop').hidden && b.textContent.length > 1;
        });
        await page.keyboard.press('Escape');
        await waitCancelled(server, before0); // cancelled on the server, nothing generated after
        await page.locator('#stop').waitFor({ state: 'hidden' });
        const stats = (await page.locator('#messages li.msg.assistant:last-child .stats').textContent()) || '';
        assert.match(stats, /stopped/, `the answer says it was stopped: ${stats}`);
        assert.deepEqual(errors, [], 'no console errors');
    });

    test('tool calls and reasoning are shown; the last turn can be edited and regenerated', T, async () => {
        const { page, errors } = await open(server.url);
        await page.locator('#model-name', { hasText: 'rapid-e2e' }).waitFor();
        await setSampling(page, 200);
        const finished = () => page.locator('#stop').waitFor({ state: 'hidden' });
        await page.locator('#settings summary').click();
        await page.locator('#tools').fill(JSON.stringify(OPENAI_TOOLS));
        await page.locator('#tools').dispatchEvent('change');
        await page.locator('#settings summary').click();
        await page.locator('#prompt').fill(PROMPTS.tool);
        await page.locator('#send').click();
        await page.locator('#messages li.msg.assistant .tool-call').waitFor();
        await finished();
        assert.equal(await page.locator('#messages .tool-call .name').first().textContent(), 'get_weather');
        assert.equal(JSON.parse(await page.locator('#messages .tool-call pre').first().textContent()).city, 'Paris');
        await shot(page, 'chat-tool-call-light');

        await page.locator('#settings summary').click();
        await page.locator('#tools').fill('');
        await page.locator('#tools').dispatchEvent('change');
        await page.locator('#settings summary').click();
        await page.locator('#new-chat').click();
        await page.locator('#prompt').fill(PROMPTS.think);
        await page.locator('#prompt').press('Enter');
        await page.locator('#messages li.msg.assistant details.reasoning').waitFor();
        await finished();
        const reasoning = page.locator('#messages li.msg.assistant details.reasoning');
        assert.equal(await reasoning.evaluate((d) => d.open), false, 'the reasoning is folded once the answer is there');
        await reasoning.locator('summary').click();
        assert.ok((await reasoning.locator('.text').textContent()).length > 0, 'the reasoning unfolds');

        // Edit: the last user turn comes back into the composer; sending replaces it and its answer.
        await page.locator('#messages li.msg.user button', { hasText: 'Edit' }).click();
        assert.equal(await page.locator('#prompt').inputValue(), PROMPTS.think);
        await page.locator('#prompt').fill('Say hello again.');
        await page.locator('#prompt').press('Enter');
        await finished();
        const turns = async () => page.locator('#messages li.msg').evaluateAll((l) => l.map((e) => e.className));
        assert.deepEqual(await turns(), ['msg user', 'msg assistant']);
        assert.equal(await page.locator('#messages li.msg.user .body').textContent(), 'Say hello again.');
        // Regenerate: the answer is asked for again, in its place.
        await page.locator('#messages li.msg.assistant button', { hasText: 'Regenerate' }).click();
        await finished();
        assert.deepEqual(await turns(), ['msg user', 'msg assistant']);
        // Kept in the browser: a reload shows the same conversation.
        await page.reload();
        await page.locator('#messages li.msg.user .body', { hasText: 'Say hello again.' }).waitFor();
        assert.deepEqual(await turns(), ['msg user', 'msg assistant']);
        assert.deepEqual(errors, [], 'no console errors');
    });

    test('hostile Markdown is shown as text: the renderer, and a stored conversation', T, async () => {
        const { page, errors } = await open(server.url);
        const hostile = [
            '<script>window.__pwned = 1</script>',
            '<img src=x onerror="window.__pwned = 2">',
            '**<b onmouseover=alert(1)>bold</b>** and `<i>code</i>`',
            '[click](javascript:window.__pwned=3) [ok](https://example.com/a)',
            '```html',
            '<iframe src="javascript:window.__pwned=4"></iframe>',
            '```',
            '> <svg onload="window.__pwned=5">',
        ].join('\n');
        const r = await page.evaluate(async (text) => {
            const { render } = await import('/ui/markdown.js');
            const div = document.createElement('div');
            div.appendChild(render(text));
            document.body.appendChild(div);
            const tags = [...div.querySelectorAll('*')].map((e) => e.tagName.toLowerCase());
            const attrs = [...div.querySelectorAll('*')].flatMap((e) => [...e.attributes].map((a) => `${a.name}=${a.value}`));
            await new Promise((res) => setTimeout(res, 200)); // an onerror would have run by now
            const links = [...div.querySelectorAll('a')].map((a) => a.href);
            div.remove();
            return { tags, attrs, text: div.textContent, pwned: window.__pwned ?? null, links };
        }, hostile);
        assert.equal(r.pwned, null, 'nothing ran');
        assert.deepEqual(r.tags.filter((t) => !ALLOWED.has(t)), [], `only the renderer's elements: ${r.tags}`);
        assert.deepEqual(r.attrs.filter((a) => /^on/i.test(a) || /javascript:/i.test(a)), [], 'no handler or javascript: attribute');
        assert.deepEqual(r.links, ['https://example.com/a'], 'only the https link is a link');
        for (const s of ['<script>window.__pwned = 1</script>', '<img src=x onerror="window.__pwned = 2">', '<iframe src=', '<svg onload'])
            assert.ok(r.text.includes(s), `"${s}" is shown as text`);
        assert.ok(r.tags.includes('strong') && r.tags.includes('pre'), 'Markdown still renders');

        // The same text as a stored answer, drawn by the chat after a reload.
        await page.evaluate((text) => {
            const conv = { id: 'hostile', title: 'hostile', system: '', updated: Date.now(), messages: [
                { role: 'user', content: '<img src=x onerror="window.__pwned = 6">' },
                { role: 'assistant', content: text, reasoning: '<script>window.__pwned = 7</script>' },
            ] };
            localStorage.setItem('rapid.conversations', JSON.stringify([conv]));
        }, hostile);
        await page.reload();
        await page.locator('#messages li.msg.assistant .body p').first().waitFor();
        await page.waitForTimeout(200);
        assert.equal(await page.evaluate(() => window.__pwned ?? null), null, 'nothing ran');
        await assertTextOnly(page);
        const shown = await page.locator('#messages').textContent();
        assert.ok(shown.includes('<script>window.__pwned = 1</script>'), 'the script is shown as text');
        assert.ok(shown.includes('<img src=x onerror="window.__pwned = 6">'), "the user's markup is shown as text");
        await page.locator('#messages details.reasoning summary').click();
        assert.equal(await page.locator('#messages details.reasoning .text').textContent(), '<script>window.__pwned = 7</script>');
        assert.deepEqual(errors, [], 'no console errors');
    });

    test('the Status view shows what /v1/status reports and follows it without a reload', T, async () => {
        const { page, errors } = await open(server.url);
        await page.locator('#model-name', { hasText: 'rapid-e2e' }).waitFor();
        await page.evaluate(() => (window.__same = true));
        await page.keyboard.press('Alt+2'); // the keyboard switches views
        assert.equal(await page.locator('#tab-status').getAttribute('aria-selected'), 'true');
        await page.locator('#cards [data-k="model.name"]', { hasText: 'rapid-e2e' }).waitFor();

        const shownValue = (k) => page.locator(`#cards [data-k="${k}"]`).textContent();
        const norm = (v) => (typeof v === 'number' ? v.toLocaleString('en-US') : String(v));
        const keys = [
            'model.name', 'model.architecture', 'model.weight_type', 'model.layers', 'model.context_tokens', 'model.device',
            'model.backend', 'kv.blocks', 'kv.blocks_used', 'kv.blocks_free', 'kv.block_tokens', 'kv.dtype',
            'requests.running', 'requests.queued', 'requests.done', 'requests.cancelled',
            'prefix_cache.hit_tokens', 'prefix_cache.miss_tokens', 'prefix_cache.memory.hit_blocks',
            'prefix_cache.disk.hit_blocks', 'prefix_cache.memory.blocks', 'speculation.steps', 'speculation.accepted_tokens',
        ];
        const get = (o, k) => k.split('.').reduce((x, p) => x?.[p], o);
        // The server is idle: the page's next refresh shows exactly the server's figures.
        let diffs = [];
        const compare = async () => {
            const st = (await request(server, { path: '/v1/status' })).json();
            diffs = [];
            for (const k of keys) {
                const want = norm(get(st, k));
                const got = await shownValue(k);
                if (got !== want) diffs.push(`${k}: page ${got}, server ${want}`);
            }
            return diffs.length ? null : st;
        };
        let st = null;
        for (let i = 0; i < 20 && !st; i++) {
            st = await compare();
            if (!st) await page.waitForTimeout(500);
        }
        assert.ok(st, `the page shows /v1/status's figures: ${diffs.join('; ')}`);
        assert.ok(st.requests.done >= 2, 'the earlier tests made requests');
        // Speculation: a row per method, with its on/off.
        for (const m of st.speculation.methods) {
            const row = page.locator(`#spec-rows tr[data-method="${m.method}"] td`);
            assert.equal(await row.nth(1).textContent(), m.enabled ? 'on' : 'off');
            assert.equal(await row.nth(2).textContent(), m.drafted.toLocaleString('en-US'));
        }
        // A request made elsewhere shows up without a reload.
        const done = st.requests.done;
        const r = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: { messages: [{ role: 'user', content: PROMPTS.short }], max_tokens: 8 },
        });
        assert.equal(r.status, 200);
        assert.equal(typeof r.json().timings.draft_tokens_accepted, 'number', 'the reply carries timings');
        await waitFor(async () => (await shownValue('requests.done')) === (done + 1).toLocaleString('en-US'), 10_000,
            'the page to show one more request done');
        assert.equal(await page.evaluate(() => window.__same), true, 'the page was not reloaded');
        // Two throughput samples at least, so the charts have a line; tall enough for every card.
        await page.setViewportSize({ width: 1280, height: 1000 });
        await page.waitForTimeout(4500);
        await shot(page, 'status-light');
        await page.emulateMedia({ colorScheme: 'dark' });
        await page.waitForTimeout(2500); // the charts take the theme's colours at their next refresh
        await shot(page, 'status-dark');
        await page.setViewportSize({ width: 390, height: 780 });
        await page.waitForTimeout(2500);
        await shot(page, 'status-phone-dark');
        assert.deepEqual(errors, [], 'no console errors');
    });

    test('with --api-key: the shell is served, the page asks for the key and says when it is wrong', T, async () => {
        const keyed = await startServer(['--api-key', 'sk-web-right', '--ctx', '512']);
        try {
            const shell = await request(keyed, { path: '/' });
            assert.equal(shell.status, 200, 'the page shell needs no key');
            assert.match(shell.headers['content-security-policy'], /script-src 'self'/);
            assert.equal((await request(keyed, { path: '/ui/app.js' })).status, 200);
            assert.equal((await request(keyed, { path: '/v1/status' })).status, 401, 'the API still needs the key');

            const { page } = await open(keyed.url);
            await page.locator('#key-form').waitFor();
            assert.match(await page.locator('#banner').textContent(), /API key is needed/);
            await page.locator('#key-input').fill('sk-web-wrong');
            await page.locator('#key-input').press('Enter');
            await page.locator('#banner', { hasText: 'Wrong API key' }).waitFor();
            assert.match(await page.locator('#key-label').textContent(), /refused/);
            await shot(page, 'key-wrong-light');
            await page.locator('#key-input').fill('sk-web-right');
            await page.locator('#key-input').press('Enter');
            await page.locator('#key-form').waitFor({ state: 'hidden' });
            await page.locator('#model-name', { hasText: /\S/ }).waitFor();
            assert.equal(await page.locator('#banner').isHidden(), true, 'the message is gone once the key is right');
        } finally {
            await keyed.stop();
        }
    });
});
