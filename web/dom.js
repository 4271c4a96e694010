// dom.js - the two DOM helpers every script of the page uses: $ (an element by id)
// and el (a new element with a class and its text set as textContent, never HTML).

export const $ = (id) => document.getElementById(id);

export function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
}
