// status.js - the Status view: what /v1/status and /metrics say, as cards, and
// the decode and prefill throughput of the last minutes as two small charts.
//
// It polls every POLL_MS while the page is visible (on either view, so the
// charts have a history when the view is opened) and redraws only while the
// Status view is shown. Throughput is the change of the engine's counters
// (engine.tokens_generated, engine.tokens_prefilled) between two readings over
// the time between them: at the first poll the server's own history (/v1/status
// "history", a reading every 5 s for ten minutes), then the page's polls, kept
// for HISTORY_S. The charts are drawn by hand on a canvas.
//
// Every figure shown from /v1/status is an element with data-k="path.in.json"
// (e.g. "kv.blocks_used"), so a test can compare the page with the server.

import { ApiError, getJSON, getText, parseMetrics } from './api.js';
import { el } from './dom.js';

const POLL_MS = 2000;
const HISTORY_S = 300;

function bytes(n) {
    if (!Number.isFinite(n)) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) {
        n /= 1024;
        i++;
    }
    return `${n.toFixed(i && n < 100 ? 1 : 0)} ${u[i]}`;
}

function num(n) {
    return n == null ? '–' : Number(n).toLocaleString('en-US');
}

function pct(x) {
    return x == null ? '–' : `${(100 * x).toFixed(1)} %`;
}

function rate(x) {
    return x == null ? '–' : `${x.toFixed(x < 10 ? 2 : 1)}`;
}

function get(obj, path) {
    return path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

export class Status {
    // onAuth(error): called when the server answers 401.
    constructor({ onAuth }) {
        this.onAuth = onAuth;
        this.visible = false;
        this.samples = []; // {t (s), gen, pre}
        this.last = null;
        this.metrics = null;
        this.timer = null;
        this.built = false;
    }

    start() {
        if (this.timer) return;
        const tick = async () => {
            if (document.visibilityState === 'visible') await this.poll();
            this.timer = setTimeout(tick, POLL_MS);
        };
        tick();
    }

    show(on) {
        this.visible = on;
        if (on && this.last) this.draw();
    }

    async poll() {
        try {
            const [st, mt] = await Promise.all([getJSON('/v1/status'), getText('/metrics').catch(() => null)]);
            this.last = st;
            this.metrics = mt ? parseMetrics(mt) : null;
            const t = performance.now() / 1000;
            // The first read brings the server's own history (a sample every 5 s): the charts
            // then show the minutes before the page was opened too.
            if (!this.samples.length) {
                for (const h of st.history?.samples || []) {
                    if (h.age_seconds >= 1 && h.age_seconds < HISTORY_S)
                        this.samples.push({ t: t - h.age_seconds, gen: h.tokens_generated, pre: h.tokens_prefilled });
                }
            }
            this.samples.push({ t, gen: st.engine.tokens_generated, pre: st.engine.tokens_prefilled });
            while (this.samples.length > 2 && t - this.samples[0].t > HISTORY_S) this.samples.shift();
            this.error = null;
        } catch (e) {
            this.error = e;
            if (e instanceof ApiError && e.status === 401) this.onAuth(e);
        }
        if (this.visible) this.draw();
    }

    // Tokens/s between consecutive samples: [{t, gen, pre}].
    rates() {
        const out = [];
        for (let i = 1; i < this.samples.length; i++) {
            const a = this.samples[i - 1];
            const b = this.samples[i];
            const dt = b.t - a.t;
            if (dt >= 0.5) out.push({ t: b.t, gen: Math.max(0, (b.gen - a.gen) / dt), pre: Math.max(0, (b.pre - a.pre) / dt) });
        }
        return out;
    }

    draw() {
        const upd = document.getElementById('updated');
        if (this.error && !this.last) {
            upd.textContent = this.error instanceof ApiError && this.error.status === 401
                ? 'The status needs the API key (Key, top right).'
                : `Could not read the status: ${this.error.message}`;
            return;
        }
        if (!this.last) return;
        if (!this.built) this.build();
        const s = this.last;
        for (const node of document.querySelectorAll('#cards [data-k]')) {
            const v = get(s, node.dataset.k);
            const f = node.dataset.f;
            node.textContent = f === 'bytes' ? bytes(v) : f === 'pct' ? pct(v) : f === 'rate' ? rate(v) : typeof v === 'number' ? num(v) : v == null || v === '' ? '–' : String(v);
        }
        const kv = s.kv;
        document.getElementById('kv-bar').style.width = `${kv.blocks ? (100 * kv.blocks_used) / kv.blocks : 0}%`;
        const pc = s.prefix_cache;
        const looked = pc.hit_tokens + pc.miss_tokens;
        document.getElementById('hit-rate').textContent = looked ? pct(pc.hit_tokens / looked) : '–';
        this.drawSpec(s.speculation);
        const m = this.metrics;
        document.getElementById('conns').textContent = m ? num(m.rapid_connections_open) : '–';
        const ttftN = m?.rapid_time_to_first_token_seconds_count;
        document.getElementById('ttft-avg').textContent = ttftN ? `${(m.rapid_time_to_first_token_seconds_sum / ttftN).toFixed(3)} s` : '–';
        const r = this.rates();
        const now = r.length ? r[r.length - 1] : null;
        document.getElementById('gen-now').textContent = now ? rate(now.gen) : '–';
        document.getElementById('pre-now').textContent = now ? rate(now.pre) : '–';
        chart(document.getElementById('chart-gen'), r, 'gen', '--chart-1');
        chart(document.getElementById('chart-pre'), r, 'pre', '--chart-2');
        upd.textContent = this.error
            ? `Last read failed (${this.error.message}); showing the read of ${new Date(this.at).toLocaleTimeString()}.`
            : `Updated ${new Date().toLocaleTimeString()} · every ${POLL_MS / 1000} s`;
        if (!this.error) this.at = Date.now();
    }

    drawSpec(sp) {
        const tb = document.getElementById('spec-rows');
        tb.replaceChildren();
        for (const m of sp.methods) {
            const tr = el('tr');
            tr.dataset.method = m.method;
            tr.append(
                el('td', null, m.method),
                el('td', null, m.enabled ? 'on' : 'off'),
                el('td', null, num(m.drafted)),
                el('td', null, num(m.accepted)),
                el('td', null, pct(m.acceptance)),
                el('td', null, m.tokens_per_step == null ? '–' : `${m.tokens_per_step.toFixed(2)}×`),
            );
            tb.appendChild(tr);
        }
    }

    // The cards, once: their figures are filled in by draw().
    build() {
        const cards = document.getElementById('cards');
        cards.replaceChildren();
        const card = (title, rows, extra) => {
            const c = el('section', 'card');
            c.appendChild(el('h2', null, title));
            const dl = el('dl');
            for (const [label, key, f] of rows) {
                dl.appendChild(el('dt', null, label));
                const dd = el('dd');
                if (key.startsWith('#')) dd.id = key.slice(1);
                else dd.dataset.k = key;
                if (f) dd.dataset.f = f;
                dl.appendChild(dd);
            }
            c.appendChild(dl);
            if (extra) extra(c);
            cards.appendChild(c);
            return c;
        };
        const tp = el('section', 'card wide');
        tp.appendChild(el('h2', null, `Throughput, last ${HISTORY_S / 60} minutes`));
        const plots = el('div', 'plots');
        tp.appendChild(plots);
        for (const [id, label, k] of [['gen', 'Decode', 'k1'], ['pre', 'Prefill', 'k2']]) {
            const fig = el('figure', 'plot');
            const cap = el('figcaption', 'legend');
            const name = el('span', k, `${label} tokens/s, now `);
            const now = el('strong');
            now.id = `${id}-now`;
            name.appendChild(now);
            cap.appendChild(name);
            const cv = el('canvas', 'chart');
            cv.id = `chart-${id}`;
            cv.setAttribute('role', 'img');
            cv.setAttribute('aria-label', `${label} tokens per second over the last ${HISTORY_S / 60} minutes`);
            fig.append(cap, cv);
            plots.appendChild(fig);
        }
        cards.appendChild(tp);
        card('Model', [
            ['Name', 'model.name'],
            ['Architecture', 'model.architecture'],
            ['Weights', 'model.weight_type'],
            ['Size', 'model.size_bytes', 'bytes'],
            ['Layers', 'model.layers'],
            ['Context', 'model.context_tokens'],
            ['Device', 'model.device'],
            ['Backend', 'model.backend'],
        ]);
        card('Requests', [
            ['Running', 'requests.running'],
            ['Queued', 'requests.queued'],
            ['Done', 'requests.done'],
            ['Cancelled', 'requests.cancelled'],
            ['Preempted', 'requests.preemptions'],
            ['Connections open', '#conns'],
            ['Mean first token', '#ttft-avg'],
        ]);
        card(
            'KV cache',
            [
                ['Blocks used', 'kv.blocks_used'],
                ['Blocks free', 'kv.blocks_free'],
                ['Blocks', 'kv.blocks'],
                ['Tokens a block', 'kv.block_tokens'],
                ['Stored as', 'kv.dtype'],
                ['Pool', 'kv.bytes', 'bytes'],
            ],
            (c) => {
                const bar = el('div', 'bar');
                bar.setAttribute('role', 'presentation');
                const fill = el('span');
                fill.id = 'kv-bar';
                bar.appendChild(fill);
                c.insertBefore(bar, c.querySelector('dl'));
            },
        );
        card('Prefix cache', [
            ['Hit tokens', 'prefix_cache.hit_tokens'],
            ['Missed tokens', 'prefix_cache.miss_tokens'],
            ['Hit rate', '#hit-rate'],
            ['Blocks hit in memory', 'prefix_cache.memory.hit_blocks'],
            ['Blocks hit on disk', 'prefix_cache.disk.hit_blocks'],
            ['In memory', 'prefix_cache.memory.blocks'],
            ['On disk', 'prefix_cache.disk.blocks'],
            ['Disk bytes', 'prefix_cache.disk.bytes', 'bytes'],
        ]);
        const spec = card('Speculative decoding', [
            ['Steps that drafted', 'speculation.steps'],
            ['Draft tokens accepted', 'speculation.accepted_tokens'],
            ['Tokens a drafting step', 'speculation.tokens_per_step', 'rate'],
        ]);
        const table = el('table');
        const head = el('tr');
        for (const h of ['Method', '', 'Drafted', 'Accepted', 'Rate', 'Tokens/step']) head.appendChild(el('th', null, h));
        const thead = el('thead');
        thead.appendChild(head);
        const tbody = el('tbody');
        tbody.id = 'spec-rows';
        table.append(thead, tbody);
        spec.classList.add('spec');
        const scroll = el('div', 'scroll');
        scroll.appendChild(table);
        spec.appendChild(scroll);
        spec.appendChild(el('p', 'note', 'Tokens/step: what a step that verified drafts emitted on average (the verified token and the accepted drafts), the most speculation can speed decoding up.'));
        this.built = true;
    }
}

// A line chart of points[key] over the last HISTORY_S seconds, with its peak marked.
function chart(canvas, points, key, colorVar) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (!w || !h) return;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    const css = getComputedStyle(document.documentElement);
    const color = css.getPropertyValue(colorVar).trim();
    const line = css.getPropertyValue('--line').trim();
    const muted = css.getPropertyValue('--muted').trim();
    g.clearRect(0, 0, w, h);
    const pad = { l: 44, r: 8, t: 8, b: 18 };
    const pw = w - pad.l - pad.r;
    const ph = h - pad.t - pad.b;
    const now = performance.now() / 1000;
    const peak = Math.max(1, ...points.map((p) => p[key]));
    const top = niceCeil(peak);
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = muted;
    g.strokeStyle = line;
    g.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
        const y = pad.t + (ph * i) / 2 + 0.5;
        g.beginPath();
        g.moveTo(pad.l, y);
        g.lineTo(w - pad.r, y);
        g.stroke();
        g.textAlign = 'right';
        g.textBaseline = 'middle';
        const v = (top * (2 - i)) / 2;
        g.fillText(v >= 1000 ? `${v / 1000}k` : String(v), pad.l - 6, y);
    }
    g.textAlign = 'left';
    g.textBaseline = 'top';
    g.fillText(`-${HISTORY_S / 60} min`, pad.l, h - pad.b + 4);
    g.textAlign = 'right';
    g.fillText('now', w - pad.r, h - pad.b + 4);
    if (!points.length) return;
    const x = (t) => pad.l + pw * (1 - (now - t) / HISTORY_S);
    const y = (v) => pad.t + ph * (1 - v / top);
    g.beginPath();
    points.forEach((p, i) => (i ? g.lineTo(x(p.t), y(p[key])) : g.moveTo(x(p.t), y(p[key]))));
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.stroke();
    g.lineTo(x(points[points.length - 1].t), y(0));
    g.lineTo(x(points[0].t), y(0));
    g.closePath();
    g.globalAlpha = 0.15;
    g.fillStyle = color;
    g.fill();
    g.globalAlpha = 1;
}

function niceCeil(v) {
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
}
