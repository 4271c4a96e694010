// readme_shots.mjs - makes the README's screenshots of the web page (docs/web-chat.png,
// docs/web-status.png) against a running server: two chat turns, then the Status view
// while a few requests run, in headless Chromium (Debian's, with web.test.js's flags).
// Not a test. By hand:
//   build/rapid serve --port 8000 &
//   node tests/e2e/readme_shots.mjs http://127.0.0.1:8000 docs
import { chromium } from 'playwright-core';

const [url, out] = process.argv.slice(2);
const browser = await chromium.launch({
    executablePath: process.env.RAPID_CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const ctx = await browser.newContext({ viewport: { width: 960, height: 600 }, colorScheme: 'light' });
const page = await ctx.newPage();
await page.goto(url);
await page.locator('#model-name', { hasText: /\S/ }).waitFor();
await page.locator('#settings summary').click();
await page.locator('#max_tokens').fill('60');
await page.locator('#max_tokens').dispatchEvent('change');
await page.locator('#settings summary').click();
for (const q of ['Write a Python function that reverses a string.', 'What is the weather in Paris?']) {
    await page.locator('#prompt').fill(q);
    await page.locator('#send').click();
    await page.waitForTimeout(300);
    await page.locator('#stop').waitFor({ state: 'hidden' });
}
await page.waitForTimeout(300);
await page.screenshot({ path: `${out}/web-chat.png` });
await page.keyboard.press('Alt+2');
for (let i = 0; i < 14; i++) {
    const body = {
        messages: [{ role: 'user', content: `Question ${i}: tell me about Python lists, item ${i * 7}.` }],
        max_tokens: 40 + 30 * (i % 5),
        temperature: 0.8,
    };
    await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    await page.waitForTimeout(1500);
}
await page.waitForTimeout(2000);
await page.setViewportSize({ width: 960, height: 640 });
await page.waitForTimeout(2500);
await page.screenshot({ path: `${out}/web-status.png` });
await browser.close();
