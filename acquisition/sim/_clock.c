/* A bus clock's rising edges in integer picoseconds: the arithmetic the rig model
 * (acquisition/sim/model.py, BusRecord) asks ~34 times a simulated frame, done as
 * Python's own float arithmetic does it (so every answer is the one the Python
 * definition gives), without the interpreter's cost.
 *
 * Edge k lies at phase + round(k * period) ps: k * period is one IEEE-754
 * double product, rounded half to even (Python's round(); rint() in the
 * default rounding mode, as nearbyint(), which also keeps the inexact flag
 * clear at a cost: nothing reads it; round_even() below). Times are integers or floats below 2**53 ps
 * (~2.5 hours of simulated time), where doubles hold every integer exactly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include "structmember.h"

#define EXACT_LIMIT 9007199254740992LL /* 2**53 */

typedef struct {
    PyObject_HEAD
    long long phase_ps;
    double period_ps;
    double asked_ps;   /* the last at_or_after() question: a register access asks twice at one instant */
    long long answer;
} Clock;

/* rint(x) in the default rounding mode (to nearest, ties to even), without the libm call where
 * |x| < 2**51: x + 1.5 * 2**52 lies in (2**52, 2**53), where doubles are exactly the integers, so the
 * addition's own IEEE-754 rounding rounds x, and the sum's representation is that of 1.5 * 2**52 plus
 * the rounded x. time_range() runs this for every sample of a block: ~2 against ~3 ms per million
 * edges with the call. Only where doubles are evaluated as doubles (FLT_EVAL_METHOD 0: SSE2, AArch64);
 * x87's extended precision would round the sum differently. */
static inline long long
round_even(double x)
{
#if FLT_EVAL_METHOD == 0
    if (fabs(x) < 2251799813685248.0) { /* 2**51 */
        double sum = x + 6755399441055744.0; /* 1.5 * 2**52 */
        long long bits;
        memcpy(&bits, &sum, sizeof bits);
        return bits - 0x4338000000000000LL; /* the representation of 1.5 * 2**52 */
    }
#endif
    return (long long)rint(x);
}

static inline long long
edge_ps(const Clock *c, long long clk)
{
    return c->phase_ps + round_even((double)clk * c->period_ps);
}

/* A product k * period below 2**62 in magnitude, plus a phase below 2**53, fits in a long long; beyond 2**63
 * C leaves the conversion undefined, so such an edge is refused rather than wrapped. */
#define PRODUCT_LIMIT 4611686018427387904.0 /* 2**62 */

static inline int
edge_in_range(const Clock *c, long long clk)
{
    return fabs((double)clk * c->period_ps) < PRODUCT_LIMIT;
}

/* A time argument as a double, exactly: an int or a float below 2**53 in magnitude. -1 on error. */
static int
time_arg(PyObject *arg, double *out)
{
    if (PyFloat_Check(arg)) {
        *out = PyFloat_AS_DOUBLE(arg);
        if (isnan(*out)) {
            PyErr_SetString(PyExc_ValueError, "time is NaN");
            return -1;
        }
        /* as an int's: at_or_after(inf) or (1e300) made a guess beyond long long, and stepped forever */
        if (!(fabs(*out) < (double)EXACT_LIMIT)) {
            PyErr_SetString(PyExc_OverflowError, "time beyond 2**53 ps: not exact in the clock's arithmetic");
            return -1;
        }
        return 0;
    }
    PyObject *index = PyNumber_Index(arg);
    if (index == NULL)
        return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v >= EXACT_LIMIT || v <= -EXACT_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "time beyond 2**53 ps: not exact in the clock's arithmetic");
        return -1;
    }
    *out = (double)v;
    return 0;
}

/* Made whole in tp_new, never changed after: no Clock exists without its phase and period (one from
 * Clock.__new__(Clock) had a period of 0, and at_or_after() stepped forever), and no __init__ call changes
 * one that others hold. */
static PyObject *
Clock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"phase_ps", "period_ps", NULL};
    long long phase;
    double period;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Ld", kwlist, &phase, &period))
        return NULL;
    if (!(period > 0) || !isfinite(period)) {
        PyErr_SetString(PyExc_ValueError, "a clock period must be positive and finite (ps)");
        return NULL;
    }
    /* Below 2**53 as the phase: edge 1 of a period beyond 2**63 ps was no long long (at_or_after() stepped
     * forever over edges all converted to the same value). */
    if (period >= (double)EXACT_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "clock period beyond 2**53 ps");
        return NULL;
    }
    if (phase <= -EXACT_LIMIT || phase >= EXACT_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "clock phase beyond 2**53 ps");
        return NULL;
    }
    Clock *self = (Clock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->phase_ps = phase;
    self->period_ps = period;
    self->asked_ps = NAN; /* never equal: no question asked yet */
    self->answer = 0;
    return (PyObject *)self;
}

PyDoc_STRVAR(at_or_after_doc,
"at_or_after(t_ps) -> int\n\n"
"The first rising edge at or after t_ps (an int or a float, ps): exactly the inverse of time_of().\n"
"The division guesses within an edge or two; the edge is then stepped to the first whose time_of()\n"
"is at or after t_ps. Edges before 0 do not exist: 0 for any earlier time.");

/* at_or_after(t) into *out: 0, or -1 with an exception set. */
static int
at_or_after_ll(Clock *self, PyObject *arg, long long *out)
{
    double t;
    if (time_arg(arg, &t) < 0)
        return -1;
    if (t == self->asked_ps) {
        *out = self->answer;
        return 0;
    }
    /* The first edge whose rounded product reaches T = ceil(t) - phase lies where the product passes
     * T - 1/2: the steps below are then one or two whatever the period. (From (t - phase) / period they were
     * 1 / (2 * period): 5e11 of them for a 1e-12 ps period.) The steps make the answer exact either way. */
    double guess = ceil((ceil(t) - (double)self->phase_ps - 0.5) / self->period_ps);
    if (guess >= 4611686018427387904.0) { /* 2**62: the steps keep clk a long long */
        PyErr_SetString(PyExc_OverflowError, "at_or_after: the edge's number beyond 2**62");
        return -1;
    }
    long long clk = guess > 0 ? (long long)guess : 0;
    while (clk > 0 && (double)edge_ps(self, clk - 1) >= t)
        clk--;
    while ((double)edge_ps(self, clk) < t)
        clk++;
    self->asked_ps = t;
    self->answer = clk;
    *out = clk;
    return 0;
}

static PyObject *
Clock_at_or_after(Clock *self, PyObject *arg)
{
    long long clk;
    return at_or_after_ll(self, arg, &clk) < 0 ? NULL : PyLong_FromLongLong(clk);
}

PyDoc_STRVAR(time_of_doc, "time_of(clk) -> int\n\nTime (ps) of rising edge clk.");

/* time_of(clk) into *out: 0, or -1 with an exception set. */
static int
time_of_ll(Clock *self, long long clk, long long *out)
{
    /* as time_range() and times_of() do: beyond, the conversion gave LLONG_MIN (time_of(2**62) < 0) */
    if (!edge_in_range(self, clk)) {
        PyErr_SetString(PyExc_OverflowError, "an edge time beyond 2**62 ps");
        return -1;
    }
    *out = edge_ps(self, clk);
    return 0;
}

static PyObject *
Clock_time_of(Clock *self, PyObject *arg)
{
    PyObject *index = PyNumber_Index(arg);
    if (index == NULL)
        return NULL;
    long long clk = PyLong_AsLongLong(index), t;
    Py_DECREF(index);
    if (clk == -1 && PyErr_Occurred())
        return NULL;
    return time_of_ll(self, clk, &t) < 0 ? NULL : PyLong_FromLongLong(t);
}

/* An int64 buffer as NumPy exports one: 8-byte signed integers ("q", or "l" where long is 8 bytes),
 * in this machine's byte order. -1 with TypeError otherwise. */
static int
check_int64(const Py_buffer *view, const char *what)
{
    const char *f = view->format != NULL ? view->format : "B";
    /* '@', '=' and the machine's own order ('<' on a little-endian one) all say native order. */
    if (*f == '@' || *f == '=')
        f++;
#if PY_LITTLE_ENDIAN
    else if (*f == '<')
        f++;
#else
    else if (*f == '>' || *f == '!')
        f++;
#endif
    if (view->ndim != 1 || view->itemsize != 8 || (f[0] != 'q' && f[0] != 'l') || f[1] != '\0') {
        PyErr_Format(PyExc_TypeError, "%s must be a one-dimensional array of native int64, not format '%s' "
                     "with %zd-byte items in %d dimensions", what, view->format ? view->format : "B",
                     view->itemsize, view->ndim);
        return -1;
    }
    return 0;
}

/* Edge times into a strided int64 buffer: out[i] = time_of(clocks[i]), or of first + i when clocks is NULL.
 * The same edge_ps() as time_of(), so every value is the one time_of() gives. 0, or -1 on a time beyond
 * what int64 holds (out then partly written); runs without the GIL (it touches no Python object). */
static int
fill_edges(const Clock *c, char *out, Py_ssize_t out_stride, Py_ssize_t n,
           const char *clocks, Py_ssize_t clocks_stride, long long first)
{
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* memcpy, not a long long *: a packed structured array's column (NumPy's default, align=False) puts
         * its int64 at any byte offset, where a misaligned access is undefined in C (a fault on some CPUs);
         * on x86 and AArch64 the compiler makes the same single load and store of it. */
        long long clk = first + i, edge;
        if (clocks != NULL)
            memcpy(&clk, clocks + i * clocks_stride, sizeof clk);
        if (!edge_in_range(c, clk)) {
            bad = 1;
            break;
        }
        edge = edge_ps(c, clk);
        memcpy(out + i * out_stride, &edge, sizeof edge);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_OverflowError, "an edge time beyond 2**62 ps");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(time_range_doc,
"time_range(first, out) -> out\n\n"
"Fill out (a writable one-dimensional int64 array, e.g. NumPy's) with the times (ps) of edges\n"
"first, first + 1, ... in one pass: out[i] == time_of(first + i), the same arithmetic. A block's\n"
"timestamps in state mode are these; NumPy's phase + rint(k * period) takes five passes and\n"
"temporaries for what this does in one.");

static PyObject *
Clock_time_range(Clock *self, PyObject *args)
{
    long long first;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "LO:time_range", &first, &out))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    int rc = check_int64(&view, "time_range's out");
    if (rc == 0 && view.shape[0] > 0 && first > LLONG_MAX - view.shape[0]) {
        PyErr_SetString(PyExc_OverflowError, "time_range: edge numbers beyond int64");
        rc = -1;
    }
    if (rc == 0)
        rc = fill_edges(self, view.buf, view.strides[0], view.shape[0], NULL, 0, first);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_INCREF(out);
    return out;
}

PyDoc_STRVAR(times_of_doc,
"times_of(clocks, out) -> out\n\n"
"Fill out (a writable one-dimensional int64 array) with the times (ps) of edges clocks (an int64\n"
"array of the same length; either may be strided, e.g. a column of a structured array):\n"
"out[i] == time_of(clocks[i]), the same arithmetic, in one pass.");

static PyObject *
Clock_times_of(Clock *self, PyObject *args)
{
    PyObject *clocks, *out;
    if (!PyArg_ParseTuple(args, "OO:times_of", &clocks, &out))
        return NULL;
    Py_buffer in_view, out_view;
    if (PyObject_GetBuffer(clocks, &in_view, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(out, &out_view, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&in_view);
        return NULL;
    }
    int rc = check_int64(&in_view, "times_of's clocks");
    if (rc == 0)
        rc = check_int64(&out_view, "times_of's out");
    if (rc == 0 && in_view.shape[0] != out_view.shape[0]) {
        PyErr_Format(PyExc_ValueError, "times_of: %zd clocks, %zd places in out", in_view.shape[0],
                     out_view.shape[0]);
        rc = -1;
    }
    if (rc == 0)
        rc = fill_edges(self, out_view.buf, out_view.strides[0], out_view.shape[0], in_view.buf,
                        in_view.strides[0], 0);
    PyBuffer_Release(&out_view);
    PyBuffer_Release(&in_view);
    if (rc < 0)
        return NULL;
    Py_INCREF(out);
    return out;
}

static PyObject *
Clock_reduce(Clock *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("O(Ld)", Py_TYPE(self), self->phase_ps, self->period_ps);
}

static PyObject *
Clock_repr(Clock *self)
{
    PyObject *period = PyFloat_FromDouble(self->period_ps);
    if (period == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("Clock(phase_ps=%lld, period_ps=%R)", self->phase_ps, period);
    Py_DECREF(period);
    return r;
}

static PyMethodDef Clock_methods[] = {
    {"at_or_after", (PyCFunction)Clock_at_or_after, METH_O, at_or_after_doc},
    {"time_of", (PyCFunction)Clock_time_of, METH_O, time_of_doc},
    {"time_range", (PyCFunction)Clock_time_range, METH_VARARGS, time_range_doc},
    {"times_of", (PyCFunction)Clock_times_of, METH_VARARGS, times_of_doc},
    {"__reduce__", (PyCFunction)Clock_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Clock_members[] = {
    {"phase_ps", T_LONGLONG, offsetof(Clock, phase_ps), READONLY, "time (ps) of edge 0"},
    {"period_ps", T_DOUBLE, offsetof(Clock, period_ps), READONLY, "clock period (ps)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ClockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.acquisition.sim._clock.Clock",
    .tp_doc = PyDoc_STR("Clock(phase_ps, period_ps): a bus clock's rising edges, edge k at "
                        "phase_ps + round(k * period_ps) ps."),
    .tp_basicsize = sizeof(Clock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Clock_new,
    .tp_repr = (reprfunc)Clock_repr,
    .tp_methods = Clock_methods,
    .tp_members = Clock_members,
};

static struct PyModuleDef clock_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._clock",
    .m_doc = "A bus clock's edges in integer picoseconds, as the rig model's Python arithmetic defines them.",
    .m_size = -1,
};

/* For _bus.c, whose bus claims ask a bus's clock twice each (~40 claims a simulated message): its bound methods
 * at_or_after and time_of recognised by their C functions, and what they compute, reached without a Python call
 * (the call, its argument's and its result's ints were ~450 instructions an answer). */
static struct {
    PyTypeObject *type;
    PyCFunction at_or_after_method, time_of_method;
    int (*at_or_after)(PyObject *clock, PyObject *t_ps, long long *out);
    int (*time_of)(PyObject *clock, long long clk, long long *out);
} c_api = {
    &ClockType,
    (PyCFunction)Clock_at_or_after,
    (PyCFunction)Clock_time_of,
    (int (*)(PyObject *, PyObject *, long long *))at_or_after_ll,
    (int (*)(PyObject *, long long, long long *))time_of_ll,
};

PyMODINIT_FUNC
PyInit__clock(void)
{
    if (PyType_Ready(&ClockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&clock_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ClockType);
    if (PyModule_AddObject(m, "Clock", (PyObject *)&ClockType) < 0) {
        Py_DECREF(&ClockType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&c_api, "nicrig.acquisition.sim._clock._C_API", NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
