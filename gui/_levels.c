/* What the timeline paints of its logic lanes' runs (gui/timeline.py Batch): the lines of the held levels and of
 * the changing stretches' edges, and the changing stretches' fills, as the arrays QPainter::drawLines and
 * drawRects read in place. The same in NumPy took some thirty array operations a frame, each a few thousand
 * instructions however few runs a lane has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

typedef struct {
    double *v;
    Py_ssize_t n;
} Quads; /* (a, b, c, d) per item: a QLineF's x1, y1, x2, y2 or a QRectF's x, y, width, height */

static inline void
put(Quads *q, double a, double b, double c, double d)
{
    double *o = q->v + 4 * q->n++;
    o[0] = a;
    o[1] = b;
    o[2] = c;
    o[3] = d;
}

/* Lanes one after another (counts[l] runs of lane l, its high level drawn at hi[l], its low at lo[l]); a lane's runs
 * follow one another without gaps, state 0 or 1 a level held, 2 changing within a pixel.
 *
 * Lines: each stretch of consecutive runs that are high or changing, as one line at hi from its first run's start to
 * its last run's end (the high level and the changing stretches' tops); likewise low or changing at lo; a mark
 * from hi to lo where one held level follows the other; both sides of every changing stretch.
 * Fills: the changing stretches more than two device pixels wide (x to pixels: sx * x + dx; the pixels from the one
 * holding its start to the one holding its end): narrower ones show nothing between their sides. */
static void
primitives(const double *x0, const double *x1, const int8_t *state, const int64_t *counts, Py_ssize_t lanes,
           const double *hi, const double *lo, double sx, double dx, Quads *lines, Quads *fills)
{
    Py_ssize_t at = 0;
    for (Py_ssize_t l = 0; l < lanes; l++) {
        Py_ssize_t end = at + (Py_ssize_t)counts[l];
        double h = hi[l], w = lo[l];
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
                put(lines, x0[high_from], h, x1[k], h);
                high_from = -1;
            }
            if (low_from >= 0 && (last || next == 1)) {
                put(lines, x0[low_from], w, x1[k], w);
                low_from = -1;
            }
            if (s == 2) {
                put(lines, x0[k], h, x0[k], w);
                put(lines, x1[k], h, x1[k], w);
                double a = floor(sx * x0[k] + dx), b = floor(sx * x1[k] + dx);
                if (fabs(b - a) + 1 > 2)
                    put(fills, x0[k], h, x1[k] - x0[k], w - h);
            } else if (!last && next != 2 && next != s) {
                put(lines, x1[k], h, x1[k], w);
            }
        }
        at = end;
    }
}

PyDoc_STRVAR(levels_doc,
"levels(x0, x1, state, counts, hi, lo, sx, dx, lines, fills) -> (lines written, fills written)\n\n"
"The logic lanes' lines and changing stretches' fills from their runs: x0, x1 (float64) and state (int8: 0, 1,\n"
"2 changing) of every run, lane after lane, counts (int64) runs a lane, hi and lo (float64) each lane's high\n"
"and low level's y, sx and dx the painter's x to device pixels. Written into lines (float64, room for 5 per\n"
"run, QLineF's layout) and fills (float64, room for 1 per run, QRectF's).");

static PyObject *
levels(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer x0, x1, st, cn, hi, lo, ln, fl;
    double sx, dx;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*ddw*w*:levels", &x0, &x1, &st, &cn, &hi, &lo, &sx, &dx, &ln, &fl))
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
    else if (ln.len < 5 * 4 * 8 * n || fl.len < 4 * 8 * n)
        PyErr_SetString(PyExc_ValueError, "levels: lines need room for 5 a run, fills for 1 a run");
    else {
        Quads lines = {ln.buf, 0}, fills = {fl.buf, 0};
        primitives(x0.buf, x1.buf, st.buf, cn.buf, lanes, hi.buf, lo.buf, sx, dx, &lines, &fills);
        out = Py_BuildValue("nn", lines.n, fills.n);
    }
    Py_buffer *views[] = {&x0, &x1, &st, &cn, &hi, &lo, &ln, &fl};
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
    .m_doc = "The timeline's logic lanes' lines and fills from their runs.",
    .m_size = -1,
    .m_methods = levels_methods,
};

PyMODINIT_FUNC
PyInit__levels(void)
{
    return PyModule_Create(&levels_module);
}
