/* What the timeline paints of its logic lanes' runs (gui/timeline.py Batch): the pixels of the held levels' lines
 * and of the changing stretches' edges, and the changing stretches' fills, as the arrays QPainter::drawRects and
 * drawLines read in place. The same in NumPy took some thirty array operations a frame, each a few thousand
 * instructions however few runs a lane has.
 *
 * The lines are given as the device pixels Qt's raster engine sets for them (a cosmetic 1-px pen, square caps, no
 * antialiasing: qcosmeticstroker.cpp's aliased stroke of a horizontal or vertical line), as filled rectangles: a
 * crowded lane's marks in neighbouring pixel columns are one rectangle, and a rectangle is filled at a fraction of
 * the cost of stroking a line (its clipping, its fixed-point set-up and a blend call each).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    double *v;
    Py_ssize_t n;
} Quads; /* (a, b, c, d) per item: a QLineF's x1, y1, x2, y2 or a QRectF's x, y, width, height */

typedef struct {
    int32_t *v;
    Py_ssize_t n;
} Pixels; /* a QRect's x1, y1, x2, y2 per item: device pixels, both edges included */

static inline void
put(Quads *q, double a, double b, double c, double d)
{
    double *o = q->v + 4 * q->n++;
    o[0] = a;
    o[1] = b;
    o[2] = c;
    o[3] = d;
}

static inline void
put_pixels(Pixels *q, int32_t x1, int32_t y1, int32_t x2, int32_t y2)
{
    const int32_t rect[4] = {x1, y1, x2, y2};
    memcpy(q->v + 4 * q->n++, rect, sizeof rect);
}

/* A device coordinate in the stroker's 26.6 fixed point (truncated toward zero, as it converts), kept within
 * int's range: beyond the device by more than a pixel it is clipped away whatever its value. */
static inline int32_t
fixed_26_6(double v)
{
    return (int32_t)(fmin(fmax(v, -2.0), (double)(1 << 24)) * 64.0);
}

/* The pixels (first, last: both included) a line from device coordinate a to b covers along itself: the pixel
 * holding each end, the caps reaching half a pixel either side; none when its ends are in one 1/64 of a pixel
 * (the stroker draws nothing). */
static inline int
along(double a, double b, int32_t *first, int32_t *last)
{
    int32_t fa = fixed_26_6(fmin(a, b)), fb = fixed_26_6(fmax(a, b));
    if (fa == fb)
        return 0;
    *first = fa >> 6;
    *last = fb >> 6;
    return 1;
}

/* One lane's marks from its high level to its low (at device rows top to bottom), in the order of their x: those in
 * neighbouring columns gathered into one rectangle, written when the next mark is further. */
typedef struct {
    Pixels *out;
    int32_t top, bottom;
    int open; /* a rectangle of columns [from, to] is open */
    int32_t from, to;
} Marks;

static void
mark(Marks *m, int32_t column)
{
    if (m->open && column >= m->from - 1 && column <= m->to + 1) {
        m->from = column < m->from ? column : m->from;
        m->to = column > m->to ? column : m->to;
        return;
    }
    if (m->open)
        put_pixels(m->out, m->from, m->top, m->to, m->bottom);
    m->open = 1;
    m->from = m->to = column;
}

static void
marks_done(Marks *m)
{
    if (m->open)
        put_pixels(m->out, m->from, m->top, m->to, m->bottom);
    m->open = 0;
}

/* The painter's x and y to device pixels (sx * x + dx, sy * y + dy) and where lines go. */
typedef struct {
    double sx, dx, sy, dy;
    Pixels *pixels;
    Quads *lines;
} Device;

/* A held level's line from x = a to b at y (device row: row). */
static void
level(const Device *d, double a, double b, double y, int32_t row)
{
    int32_t first, last;
    if (a == b)
        put(d->lines, a, y, b, y);
    else if (along(d->sx * a + d->dx, d->sx * b + d->dx, &first, &last))
        put_pixels(d->pixels, first, row, last, row);
}

/* A mark at x from the lane's high level h to its low w: its column into the lane's marks when they are drawn. */
static void
edge(const Device *d, Marks *m, int drawn, double x, double h, double w)
{
    if (h == w)
        put(d->lines, x, h, x, w);
    else if (drawn)
        mark(m, fixed_26_6(d->sx * x + d->dx) >> 6);
}

/* Lanes one after another (counts[l] runs of lane l, its high level drawn at hi[l], its low at lo[l]); a lane's runs
 * follow one another without gaps, state 0 or 1 a level held, 2 changing within a pixel. x to device pixels:
 * sx * x + dx, y: sy * y + dy.
 *
 * Lines: each stretch of consecutive runs that are high or changing, as one line at hi from its first run's start to
 * its last run's end (the high level and the changing stretches' tops); likewise low or changing at lo; a mark
 * from hi to lo where one held level follows the other; both sides of every changing stretch. Each as the pixels
 * it sets, a lane's marks in neighbouring columns as one rectangle; a line whose ends are one point (which the
 * stroker draws as a point, by other rules) is left to Qt, in lines.
 * Fills: the changing stretches more than two device pixels wide (the pixels from the one holding its start to the
 * one holding its end): narrower ones show nothing between their sides. */
static void
primitives(const double *x0, const double *x1, const int8_t *state, const int64_t *counts, Py_ssize_t lanes,
           const double *hi, const double *lo, const Device *d, Quads *fills)
{
    Py_ssize_t at = 0;
    for (Py_ssize_t l = 0; l < lanes; l++) {
        Py_ssize_t end = at + (Py_ssize_t)counts[l];
        double h = hi[l], w = lo[l];
        int32_t row_h = fixed_26_6(d->sy * h + d->dy) >> 6, row_w = fixed_26_6(d->sy * w + d->dy) >> 6;
        Marks m = {d->pixels, 0, 0, 0, 0, 0};
        int drawn = h != w && along(d->sy * h + d->dy, d->sy * w + d->dy, &m.top, &m.bottom);
        /* the first run of each level's open stretch (-1: none open) */
        Py_ssize_t high_from = -1, low_from = -1;
        for (Py_ssize_t k = at; k < end; k++) {
            int8_t s = state[k];
            if (s != 0 && high_from < 0)
                high_from = k;
            if (s != 1 && low_from < 0)
                low_from = k;
            int last = k + 1 == end;
            int8_t next = last ? -1 : state[k + 1];
            if (high_from >= 0 && (last || next == 0)) {
                level(d, x0[high_from], x1[k], h, row_h);
                high_from = -1;
            }
            if (low_from >= 0 && (last || next == 1)) {
                level(d, x0[low_from], x1[k], w, row_w);
                low_from = -1;
            }
            if (s == 2) {
                edge(d, &m, drawn, x0[k], h, w);
                edge(d, &m, drawn, x1[k], h, w);
                double a = floor(d->sx * x0[k] + d->dx), b = floor(d->sx * x1[k] + d->dx);
                if (fabs(b - a) + 1 > 2)
                    put(fills, x0[k], h, x1[k] - x0[k], w - h);
            } else if (!last && next != 2 && next != s) {
                edge(d, &m, drawn, x1[k], h, w);
            }
        }
        marks_done(&m);
        at = end;
    }
}

PyDoc_STRVAR(levels_doc,
"levels(x0, x1, state, counts, hi, lo, sx, dx, sy, dy, pixels, lines, fills)\n"
"-> (pixel rectangles written, lines written, fills written)\n\n"
"The logic lanes' lines and changing stretches' fills from their runs: x0, x1 (float64) and state (int8: 0, 1,\n"
"2 changing) of every run, lane after lane, counts (int64) runs a lane, hi and lo (float64) each lane's high\n"
"and low level's y, (sx, dx) and (sy, dy) the painter's x and y to device pixels. The lines' device pixels are\n"
"written into pixels (int32, room for 5 per run, QRect's layout), the lines Qt is left to draw into lines\n"
"(float64, room for 5 per run, QLineF's) and the fills into fills (float64, room for 1 per run, QRectF's).");

static PyObject *
levels(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer x0, x1, st, cn, hi, lo, px, ln, fl;
    double sx, dx, sy, dy;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*ddddw*w*w*:levels", &x0, &x1, &st, &cn, &hi, &lo, &sx, &dx, &sy, &dy,
                          &px, &ln, &fl))
        return NULL;
    Py_ssize_t n = st.len, lanes = cn.len / 8, total = 0;
    for (Py_ssize_t l = 0; l < lanes; l++) {
        int64_t c = ((const int64_t *)cn.buf)[l];
        total += c < 0 ? n + 1 : (Py_ssize_t)c;
    }
    PyObject *out = NULL;
    if (x0.len != 8 * n || x1.len != 8 * n || total != n || hi.len != 8 * lanes || lo.len != 8 * lanes)
        PyErr_SetString(PyExc_ValueError, "levels: x0, x1 and state need one item a run, the counts add up to the "
                                          "runs, hi and lo one item a lane");
    else if (px.len < 5 * 4 * 4 * n || ln.len < 5 * 4 * 8 * n || fl.len < 4 * 8 * n)
        PyErr_SetString(PyExc_ValueError, "levels: pixels and lines need room for 5 a run, fills for 1 a run");
    else {
        Pixels pixels = {px.buf, 0};
        Quads lines = {ln.buf, 0}, fills = {fl.buf, 0};
        Device device = {sx, dx, sy, dy, &pixels, &lines};
        primitives(x0.buf, x1.buf, st.buf, cn.buf, lanes, hi.buf, lo.buf, &device, &fills);
        out = Py_BuildValue("nnn", pixels.n, lines.n, fills.n);
    }
    Py_buffer *views[] = {&x0, &x1, &st, &cn, &hi, &lo, &px, &ln, &fl};
    for (size_t v = 0; v < sizeof views / sizeof *views; v++)
        PyBuffer_Release(views[v]);
    return out;
}

static PyMethodDef levels_methods[] = {
    {"levels", levels, METH_VARARGS, levels_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef levels_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.gui._levels",
    .m_doc = "The timeline's logic lanes' lines (as the pixels they set) and fills from their runs.",
    .m_size = -1,
    .m_methods = levels_methods,
};

PyMODINIT_FUNC
PyInit__levels(void)
{
    return PyModule_Create(&levels_module);
}
