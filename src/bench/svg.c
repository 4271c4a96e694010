/*
 * svg.c - the comparison as an SVG bar chart, written as text.
 *
 * One row per task measured in both files: a bar for the decode speedup (B/A)
 * and one for the end-to-end speedup (A/B), each with a whisker over the
 * range of the paired runs and its median printed at the end; a dashed line
 * marks 1x (no change). The x axis runs from 0 to the largest value rounded
 * up to half a unit. Plain SVG 1.1 with no scripts or external references,
 * so it shows the same in browsers, GitHub and image viewers.
 */
#include "bench_int.h"

#include <math.h>

#define LEFT 210.0  // room for the task names
#define PLOT 480.0  // width of the plot area
#define RIGHT 70.0  // room for the last value label
#define TOP 64.0    // title and legend
#define ROW 30.0    // one task
#define BOTTOM 40.0 // the axis labels
#define BAR 10.0

static const char *const color_decode = "#4e79a7";
static const char *const color_e2e = "#f28e2b";

// Appends s with XML's special characters escaped.
static void xml_text(rp_bench_buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            rp_bench_buf_adds(b, "&amp;");
            break;
        case '<':
            rp_bench_buf_adds(b, "&lt;");
            break;
        case '>':
            rp_bench_buf_adds(b, "&gt;");
            break;
        case '"':
            rp_bench_buf_adds(b, "&quot;");
            break;
        case '\'':
            rp_bench_buf_adds(b, "&apos;");
            break;
        default:
            // Control characters are not allowed in XML 1.0.
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                rp_bench_buf_add(b, s, 1);
        }
    }
}

// One bar with its whisker and value label; v = {median, min, max}.
static void bar(rp_bench_buf *b, double y, const double v[3], double scale, const char *color)
{
    if (!isfinite(v[0])) {
        rp_bench_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"v\">n/a</text>\n", LEFT + 4, y + BAR - 1);
        return;
    }
    rp_bench_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", LEFT, y,
                        v[0] * scale, BAR, color);
    double end = v[0];
    if (isfinite(v[1]) && isfinite(v[2]) && v[2] > v[1]) {
        double cy = y + BAR / 2;
        rp_bench_buf_printf(b, "<path d=\"M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f\" class=\"w\"/>\n",
                            LEFT + v[1] * scale, cy, LEFT + v[2] * scale, LEFT + v[1] * scale, cy - 3, cy + 3,
                            LEFT + v[2] * scale, cy - 3, cy + 3);
        end = v[2];
    }
    rp_bench_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"v\">%.2fx</text>\n", LEFT + end * scale + 4,
                        y + BAR - 1, v[0]);
}

char *rp_bench_cmp_svg(const rp_bench_cmp *c)
{
    size_t rows = 0;
    double max = 1.0;
    for (size_t i = 0; i < c->n_rows; i++) {
        const rp_bench_cmp_row *r = &c->rows[i];
        if (r->only)
            continue;
        rows++;
        for (int k = 0; k < 3; k++) {
            if (isfinite(r->decode[k]) && r->decode[k] > max)
                max = r->decode[k];
            if (isfinite(r->e2e[k]) && r->e2e[k] > max)
                max = r->e2e[k];
        }
    }
    double axis = ceil(max * 2 - 1e-9) / 2; // up to the next half unit
    if (axis > 1000)
        axis = 1000; // a broken file must not make a million ticks
    double scale = PLOT / axis;
    double height = TOP + ROW * (double)rows + BOTTOM, width = LEFT + PLOT + RIGHT;
    rp_bench_buf b = {0};
    rp_bench_buf_printf(&b,
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
                        "%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                        width, height, width, height);
    rp_bench_buf_adds(&b,
                      "<style>.v{fill:#333;font-size:10px}.w{stroke:#222;stroke-width:1;fill:none}"
                      ".g{stroke:#ddd;stroke-width:1}.one{stroke:#c00;stroke-width:1;stroke-dasharray:4 3}</style>\n");
    rp_bench_buf_printf(&b, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n", width, height);
    rp_bench_buf_adds(&b, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Speedup of B (");
    xml_text(&b, c->label_b);
    rp_bench_buf_adds(&b, ") over A (");
    xml_text(&b, c->label_a);
    rp_bench_buf_adds(&b, ")</text>\n");
    rp_bench_buf_printf(
        &b,
        "<rect x=\"10\" y=\"34\" width=\"12\" height=\"10\" fill=\"%s\"/><text x=\"26\" y=\"43\">decode "
        "tok/s B/A</text>\n<rect x=\"150\" y=\"34\" width=\"12\" height=\"10\" fill=\"%s\"/><text "
        "x=\"166\" y=\"43\">end to end A/B</text>\n<text x=\"290\" y=\"43\" class=\"v\">median, whisker: "
        "range over runs</text>\n",
        color_decode, color_e2e);
    // Grid lines and axis labels every half unit.
    double bottom = TOP + ROW * (double)rows;
    for (int k = 0; k <= (int)(axis * 2 + 1e-9); k++) {
        double x = LEFT + k * 0.5 * scale;
        rp_bench_buf_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"g\"/>\n", x, TOP - 6, x,
                            bottom);
        rp_bench_buf_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"v\">%.1fx</text>\n", x,
                            bottom + 14, k * 0.5);
    }
    size_t row = 0;
    for (size_t i = 0; i < c->n_rows; i++) {
        const rp_bench_cmp_row *r = &c->rows[i];
        if (r->only)
            continue;
        double y = TOP + ROW * (double)row++;
        rp_bench_buf_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 8, y + BAR + 4);
        xml_text(&b, r->task);
        rp_bench_buf_adds(&b, "</text>\n");
        bar(&b, y + 2, r->decode, scale, color_decode);
        bar(&b, y + 2 + BAR + 2, r->e2e, scale, color_e2e);
    }
    rp_bench_buf_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"one\"/>\n", LEFT + scale,
                        TOP - 6, LEFT + scale, bottom);
    rp_bench_buf_adds(&b, "</svg>\n");
    return rp_bench_buf_take(&b);
}
