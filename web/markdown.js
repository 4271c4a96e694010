// markdown.js - a small Markdown renderer that builds DOM nodes, never HTML text.
//
// The model's reply is untrusted: it may hold <script>, <img onerror=...> or any
// markup. Nothing here parses HTML: every piece of text becomes a text node
// (textContent / createTextNode) inside elements made with createElement, so
// markup in a reply shows as the characters it is. Links are kept only for
// http(s) and mailto addresses (no javascript: or data:), opened in a new tab
// without a referrer.
//
// What it reads: fenced code blocks (``` or ~~~, with a language name, shown with
// a copy button), indented code is not special, ATX headings (#..######),
// blockquotes (>), bullet (-, *, +) and numbered lists (one level; nested items
// keep their text), horizontal rules, paragraphs; inline: `code`, **bold**,
// *em* / _em_, ~~strike~~, [text](url), <url> and bare http(s) addresses.
// An unclosed fence (a reply still streaming) runs to the end of the text.
//
// render(text) -> DocumentFragment.

import { el } from './dom.js';

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function link(text, href) {
    if (!SAFE_URL.test(href)) return document.createTextNode(text === href ? text : `${text} (${href})`);
    const a = el('a', null, text);
    a.href = href;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    return a;
}

// Inline spans of one block's text, appended to parent.
const INLINE = [
    { re: /`([^`\n]+)`/y, make: (m) => el('code', null, m[1]) },
    { re: /\*\*(?=\S)([\s\S]*?\S)\*\*/y, make: (m) => wrap('strong', m[1]) },
    { re: /__(?=\S)([\s\S]*?\S)__(?![A-Za-z0-9])/y, make: (m) => wrap('strong', m[1]) },
    { re: /~~(?=\S)([\s\S]*?\S)~~/y, make: (m) => wrap('del', m[1]) },
    { re: /\*(?=[^\s*])([^*\n]*?[^\s*])\*/y, make: (m) => wrap('em', m[1]) },
    { re: /_(?=[^\s_])([^_\n]*?[^\s_])_(?![A-Za-z0-9])/y, make: (m) => wrap('em', m[1]) },
    { re: /\[([^\]\n]+)\]\(([^)\s]+)\)/y, make: (m) => link(m[1], m[2]) },
    { re: /<((?:https?:\/\/|mailto:)[^>\s]+)>/y, make: (m) => link(m[1], m[1]) },
    { re: /https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"]/y, make: (m) => link(m[0], m[0]) },
];

function wrap(tag, text) {
    const e = el(tag);
    inline(e, text);
    return e;
}

function inline(parent, text) {
    let plain = '';
    let i = 0;
    const flush = () => {
        if (plain) parent.appendChild(document.createTextNode(plain));
        plain = '';
    };
    while (i < text.length) {
        const c = text[i];
        let hit = null;
        // Bare addresses may only start a word, and _ only opens outside one (snake_case stays).
        const wordStart = i === 0 || !/[A-Za-z0-9]/.test(text[i - 1]);
        if ('`*_~[<h'.includes(c) && (c !== 'h' || i === 0 || /[\s(]/.test(text[i - 1])) && (c !== '_' || wordStart)) {
            for (const rule of INLINE) {
                rule.re.lastIndex = i;
                const m = rule.re.exec(text);
                if (m) {
                    hit = { node: rule.make(m), len: m[0].length };
                    break;
                }
            }
        }
        if (c === '\\' && i + 1 < text.length && /[\\`*_~[\]()<>#+\-.!]/.test(text[i + 1])) {
            plain += text[i + 1];
            i += 2;
        } else if (hit) {
            flush();
            parent.appendChild(hit.node);
            i += hit.len;
        } else if (c === '\n') {
            flush();
            parent.appendChild(el('br'));
            i++;
        } else {
            plain += c;
            i++;
        }
    }
    flush();
}

function codeBlock(lang, code) {
    const box = el('div', 'code');
    const bar = el('div', 'code-bar');
    bar.appendChild(el('span', 'code-lang', lang || 'text'));
    const copy = el('button', 'code-copy', 'Copy');
    copy.type = 'button';
    copy.addEventListener('click', () => {
        navigator.clipboard?.writeText(code).then(
            () => (copy.textContent = 'Copied'),
            () => (copy.textContent = 'Copy failed'),
        );
        setTimeout(() => (copy.textContent = 'Copy'), 1500);
    });
    bar.appendChild(copy);
    box.appendChild(bar);
    const pre = el('pre');
    const c = el('code', null, code);
    if (lang) c.dataset.lang = lang;
    pre.appendChild(c);
    box.appendChild(pre);
    return box;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^ {0,3}[-*+]\s+(.*)$/;
const NUMBER = /^ {0,3}(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

function isBlockStart(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || BULLET.test(line) || NUMBER.test(line) || QUOTE.test(line);
}

function blocks(parent, lines) {
    let i = 0;
    while (i < lines.length) {
        const line = lines[i];
        let m;
        if (line.trim() === '') {
            i++;
        } else if ((m = FENCE.exec(line))) {
            const fence = m[1];
            const body = [];
            i++;
            while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
            i++; // the closing fence (or the end)
            parent.appendChild(codeBlock(m[2], body.join('\n')));
        } else if ((m = HEADING.exec(line))) {
            const h = el(`h${Math.min(6, m[1].length + 2)}`);
            inline(h, m[2]);
            parent.appendChild(h);
            i++;
        } else if (RULE.test(line)) {
            parent.appendChild(el('hr'));
            i++;
        } else if (QUOTE.test(line)) {
            const body = [];
            while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
                body.push(m[1]);
                i++;
            }
            const q = el('blockquote');
            blocks(q, body);
            parent.appendChild(q);
        } else if (BULLET.test(line) || NUMBER.test(line)) {
            const ordered = !BULLET.test(line);
            const list = el(ordered ? 'ol' : 'ul');
            if (ordered) {
                const start = Number(NUMBER.exec(line)[1]);
                if (start !== 1) list.start = start;
            }
            const re = ordered ? NUMBER : BULLET;
            while (i < lines.length && (m = re.exec(lines[i]))) {
                const item = [m[ordered ? 2 : 1]];
                i++;
                // Continuation lines: indented, or plain text right after the item.
                while (i < lines.length && lines[i].trim() !== '' && !re.test(lines[i]) &&
                    (/^\s{2,}/.test(lines[i]) || !isBlockStart(lines[i]))) {
                    item.push(lines[i].trim());
                    i++;
                }
                const li = el('li');
                inline(li, item.join('\n'));
                list.appendChild(li);
                if (i < lines.length && lines[i].trim() === '' && i + 1 < lines.length && re.test(lines[i + 1])) i++;
            }
            parent.appendChild(list);
        } else {
            const para = [];
            while (i < lines.length && lines[i].trim() !== '' && (para.length === 0 || !isBlockStart(lines[i]))) {
                para.push(lines[i]);
                i++;
            }
            const p = el('p');
            inline(p, para.join('\n'));
            parent.appendChild(p);
        }
    }
}

export function render(text) {
    const frag = document.createDocumentFragment();
    blocks(frag, String(text ?? '').replace(/\r\n?/g, '\n').split('\n'));
    return frag;
}
