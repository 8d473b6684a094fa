/* A bus clock's rising edges in integer picoseconds: the arithmetic the rig model
 * (acquisition/sim/model.py, BusRecord) asks ~34 times a simulated frame, done as
 * Python's own float arithmetic does it (so every answer is the one the Python
 * definition gives), without the interpreter's cost.
 *
 * Edge k lies at phase + round(k * period) ps: k * period is one IEEE-754
 * double product, rounded half to even (Python's round(); nearbyint() in the
 * default rounding mode). Times are integers below 2**53 ps (~2.5 hours of
 * simulated time), which doubles hold exactly, or floats.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include "structmember.h"

#define EXACT_LIMIT 9007199254740992LL /* 2**53 */

typedef struct {
    PyObject_HEAD
    long long phase_ps;
    double period_ps;
    double asked_ps;   /* the last at_or_after() question: a register access asks twice at one instant */
    long long answer;
} Clock;

static inline long long
edge_ps(const Clock *c, long long clk)
{
    return c->phase_ps + (long long)nearbyint((double)clk * c->period_ps);
}

/* A time argument as a double, exactly: an int below 2**53 in magnitude, or a float. -1 on error. */
static int
time_arg(PyObject *arg, double *out)
{
    if (PyFloat_Check(arg)) {
        *out = PyFloat_AS_DOUBLE(arg);
        if (isnan(*out)) {
            PyErr_SetString(PyExc_ValueError, "time is NaN");
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

static int
Clock_init(Clock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"phase_ps", "period_ps", NULL};
    long long phase;
    double period;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Ld", kwlist, &phase, &period))
        return -1;
    if (!(period > 0) || !isfinite(period)) {
        PyErr_SetString(PyExc_ValueError, "a clock period must be positive and finite (ps)");
        return -1;
    }
    if (phase <= -EXACT_LIMIT || phase >= EXACT_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "clock phase beyond 2**53 ps");
        return -1;
    }
    self->phase_ps = phase;
    self->period_ps = period;
    self->asked_ps = NAN; /* never equal: no question asked yet */
    self->answer = 0;
    return 0;
}

PyDoc_STRVAR(at_or_after_doc,
"at_or_after(t_ps) -> int\n\n"
"The first rising edge at or after t_ps (an int or a float, ps): exactly the inverse of time_of().\n"
"The division guesses within an edge or two; the edge is then stepped to the first whose time_of()\n"
"is at or after t_ps. Edges before 0 do not exist: 0 for any earlier time.");

static PyObject *
Clock_at_or_after(Clock *self, PyObject *arg)
{
    double t;
    if (time_arg(arg, &t) < 0)
        return NULL;
    if (t == self->asked_ps)
        return PyLong_FromLongLong(self->answer);
    double guess = ceil((t - (double)self->phase_ps) / self->period_ps);
    long long clk = guess > 0 ? (long long)guess : 0;
    while (clk > 0 && (double)edge_ps(self, clk - 1) >= t)
        clk--;
    while ((double)edge_ps(self, clk) < t)
        clk++;
    self->asked_ps = t;
    self->answer = clk;
    return PyLong_FromLongLong(clk);
}

PyDoc_STRVAR(time_of_doc, "time_of(clk) -> int\n\nTime (ps) of rising edge clk.");

static PyObject *
Clock_time_of(Clock *self, PyObject *arg)
{
    PyObject *index = PyNumber_Index(arg);
    if (index == NULL)
        return NULL;
    long long clk = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (clk == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(edge_ps(self, clk));
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
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Clock_init,
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
    return m;
}
