/*
 * strata-tune --svg: one replay as a picture a browser opens. Top, each strategy's modelled
 * step latency; below, the adaptive strategy's mode of each expert at each step.
 */
#include "strata_tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

#define SVG_WIDTH      1000.0
#define SVG_LEFT       80.0  /* room for the y labels */
#define SVG_RIGHT      20.0
#define SVG_TOP        70.0  /* title and legend */
#define SVG_PLOT_H     280.0
#define SVG_GAP        90.0  /* x labels of the top panel and the timeline's title */
#define SVG_MAX_ROWS   64    /* experts shown in the timeline */
#define SVG_TIMELINE_H 320.0 /* at most; rows are 2..10 px */
#define SVG_BOTTOM     60.0

static const char *const svg_line_colour[TUNE_STRATEGIES] = {
    [TUNE_PUSH]     = "#1f77b4",
    [TUNE_PULL]     = "#ff7f0e",
    [TUNE_ADAPTIVE] = "#2ca02c",
    [TUNE_ORACLE]   = "#d62728",
};
static const char *const svg_mode_colour[ADAPT_MODES] = {
    [ADAPT_MODE_PUSH] = "#9ecae1",
    [ADAPT_MODE_PULL] = "#fd8d3c",
};

/* The plot area of a panel; steps share the x axis, one column per step. */
typedef struct svg_frame {
    double x0, y0, w, h;
    int    steps;
} svg_frame_t;

static double svg_step_x(const svg_frame_t *f, double step)
{
    return f->x0 + (step + 0.5) * f->w / f->steps;
}

/* 1, 2 or 5 times a power of ten, giving about target ticks over range. */
static double svg_nice_step(double range, int target)
{
    double raw = range / target, mag, norm;

    if (!(raw > 0.0)) {
        return 1.0;
    }
    mag  = pow(10.0, floor(log10(raw)));
    norm = raw / mag;
    return (norm <= 1.0 ? 1.0 : norm <= 2.0 ? 2.0 : norm <= 5.0 ? 5.0 : 10.0) * mag;
}

static void svg_text_escaped(FILE *out, const char *text)
{
    for (; *text != '\0'; ++text) {
        switch (*text) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default:  fputc(*text, out); break;
        }
    }
}

/* Ticks and labels of the step axis under a frame. */
static void svg_step_axis(FILE *out, const svg_frame_t *f)
{
    double tick = svg_nice_step(f->steps, 8);
    double bottom = f->y0 + f->h;

    if (tick < 1.0) {
        tick = 1.0;
    }
    fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
            f->x0, bottom, f->x0 + f->w, bottom);
    for (double v = 0.0; v < f->steps; v += tick) {
        double x = svg_step_x(f, v);

        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
                x, bottom, x, bottom + 5.0, x, bottom + 18.0, v);
    }
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n",
            f->x0 + f->w / 2.0, bottom + 36.0);
}

/* The latency axis with grid lines; returns its top in µs. */
static double svg_latency_axis(FILE *out, const svg_frame_t *f, double top_us)
{
    double tick = svg_nice_step(top_us, 5);
    double top = ceil(top_us / tick) * tick;

    if (!(top > 0.0)) {
        top = tick;
    }
    fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
            f->x0, f->y0, f->x0, f->y0 + f->h);
    for (int i = 0; i * tick <= top * (1.0 + 1e-9); ++i) {
        double y = f->y0 + f->h - i * tick / top * f->h;

        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                f->x0, y, f->x0 + f->w, y, f->x0 - 6.0, y + 4.0, i * tick);
    }
    fprintf(out, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">"
            "modelled step latency (µs)</text>\n", f->x0 - 55.0, f->y0 + f->h / 2.0);
    return top;
}

static void svg_legend(FILE *out, const svg_frame_t *f)
{
    for (int s = 0; s < TUNE_STRATEGIES; ++s) {
        double x = f->x0 + 10.0 + s * 130.0, y = f->y0 - 14.0;

        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                x, y, x + 24.0, y, svg_line_colour[s], x + 30.0, y + 4.0,
                tune_strategy_names[s]);
    }
}

static void svg_latency_panel(FILE *out, const tune_case_t *tc, const svg_frame_t *f)
{
    double peak = 0.0, top;

    for (int s = 0; s < TUNE_STRATEGIES; ++s) {
        for (int t = 0; t < tc->steps; ++t) {
            peak = tc->latency[s][t] > peak ? tc->latency[s][t] : peak;
        }
    }
    top = svg_latency_axis(out, f, peak * 1e6);
    svg_step_axis(out, f);
    svg_legend(out, f);
    for (int s = 0; s < TUNE_STRATEGIES; ++s) {
        /* The oracle dashed and adaptive wider: where they agree, both stay visible. */
        fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"",
                svg_line_colour[s], s == TUNE_ADAPTIVE ? "2.2" : "1.2",
                s == TUNE_ORACLE ? " stroke-dasharray=\"5 4\"" : "");
        for (int t = 0; t < tc->steps; ++t) {
            fprintf(out, "%s%.1f,%.1f", t ? " " : "", svg_step_x(f, t),
                    f->y0 + f->h - tc->latency[s][t] * 1e6 / top * f->h);
        }
        fputs("\"/>\n", out);
    }
}

/* One expert's row: Push as the background, one rect per run of Pull steps. */
static void svg_mode_row(FILE *out, const tune_case_t *tc, const svg_frame_t *f, int expert,
                         double y, double row_h)
{
    double cell = f->w / tc->steps;
    int start = -1;

    fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
            f->x0, y, f->w, row_h, svg_mode_colour[ADAPT_MODE_PUSH]);
    for (int t = 0; t <= tc->steps; ++t) {
        bool pull = t < tc->steps &&
                    tc->modes[(size_t)t * (size_t)tc->experts + (size_t)expert] == ADAPT_MODE_PULL;

        if (pull && start < 0) {
            start = t;
        } else if (!pull && start >= 0) {
            fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                    "fill=\"%s\"/>\n", f->x0 + start * cell, y, (t - start) * cell, row_h,
                    svg_mode_colour[ADAPT_MODE_PULL]);
            start = -1;
        }
    }
}

static void svg_mode_legend(FILE *out, const svg_frame_t *f, double y)
{
    static const char *const names[ADAPT_MODES] = {"push", "pull"};

    for (int m = 0; m < ADAPT_MODES; ++m) {
        double x = f->x0 + f->w - 150.0 + m * 75.0;

        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x, y - 9.0, svg_mode_colour[m],
                x + 18.0, y, names[m]);
    }
}

static void svg_mode_panel(FILE *out, const tune_case_t *tc, const svg_frame_t *f, int rows,
                           double row_h)
{
    int label_every = rows > 16 ? rows / 8 : 1;

    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">adaptive: each expert's mode at each step",
            f->x0, f->y0 - 10.0);
    if (rows < tc->experts) {
        fprintf(out, " (experts 0–%d of %d shown)", rows - 1, tc->experts);
    }
    fputs("</text>\n", out);
    svg_mode_legend(out, f, f->y0 - 10.0);
    for (int e = 0; e < rows; ++e) {
        svg_mode_row(out, tc, f, e, f->y0 + e * row_h, row_h);
        if (e % label_every == 0) {
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\">"
                    "%d</text>\n", f->x0 - 6.0, f->y0 + e * row_h + row_h / 2.0 + 3.5, e);
        }
    }
    fprintf(out, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">"
            "expert</text>\n", f->x0 - 55.0, f->y0 + f->h / 2.0);
    svg_step_axis(out, f);
}

strata_status_t tune_svg_write(const tune_case_t *tc, const char *path)
{
    int rows = tc->experts < SVG_MAX_ROWS ? tc->experts : SVG_MAX_ROWS;
    double row_h = floor(SVG_TIMELINE_H / rows);
    svg_frame_t top, bottom;
    double height;
    FILE *out;
    bool failed;

    row_h  = row_h < 2.0 ? 2.0 : row_h > 10.0 ? 10.0 : row_h;
    top    = (svg_frame_t){SVG_LEFT, SVG_TOP, SVG_WIDTH - SVG_LEFT - SVG_RIGHT, SVG_PLOT_H,
                           tc->steps};
    bottom = (svg_frame_t){SVG_LEFT, SVG_TOP + SVG_PLOT_H + SVG_GAP, top.w, rows * row_h,
                           tc->steps};
    height = bottom.y0 + bottom.h + SVG_BOTTOM;
    if ((out = fopen(path, "w")) == NULL) {
        return STRATA_ERR_IO;
    }
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            SVG_WIDTH, height, SVG_WIDTH, height);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
            "<text x=\"%.1f\" y=\"24\" font-size=\"16\">strata-tune: ", SVG_LEFT);
    svg_text_escaped(out, tc->name);
    fputs("</text>\n", out);
    svg_latency_panel(out, tc, &top);
    svg_mode_panel(out, tc, &bottom, rows, row_h);
    fputs("</svg>\n", out);
    failed = ferror(out) != 0;
    if (fclose(out) != 0 || failed) {
        if (errno == 0) {
            errno = EIO;
        }
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}
