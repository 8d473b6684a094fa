/* The loop that runs the rig model's events (acquisition/sim/scheduler.py, Engine.advance), in C.
 *
 * It does what the Python loop did, step for step, so the order of everything is
 * unchanged: take the first (time, priority, id, item) entry off the queue (a heap,
 * popped with _heapq.heappop), set the environment's _now, then either call the item
 * (a plain function or bound method queued by Engine.call_in) or run a SimPy event's
 * callbacks, detached from it first, in order. The two rare endings go back to
 * Python: a StopSimulation from a callback (run(until=...)) and an event that failed
 * with nobody to handle it (Engine._after_stop, Engine._unhandled).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *heappop;        /* _heapq.heappop */
static PyObject *stop_simulation; /* simpy.core.StopSimulation */
static PyObject *str_queue, *str_now, *str_callbacks, *str_ok, *str_defused, *str_after_stop, *str_unhandled;

/* Run one SimPy event's callbacks; 0, or -1 with an exception set. */
static int
run_callbacks(PyObject *env, PyObject *event)
{
    PyObject *callbacks = PyObject_GetAttr(event, str_callbacks);
    if (callbacks == NULL)
        return -1;
    if (PyObject_SetAttr(event, str_callbacks, Py_None) < 0) {
        Py_DECREF(callbacks);
        return -1;
    }
    if (!PyList_Check(callbacks)) {
        Py_DECREF(callbacks);
        PyErr_SetString(PyExc_TypeError, "an event's callbacks must be a list");
        return -1;
    }
    /* as Python's for loop over the list: a callback appended meanwhile runs too */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(callbacks); k++) {
        PyObject *callback = PyList_GET_ITEM(callbacks, k);
        Py_INCREF(callback);
        PyObject *r = PyObject_CallOneArg(callback, event);
        Py_DECREF(callback);
        if (r == NULL) {
            if (PyErr_ExceptionMatches(stop_simulation)) {
                /* the rest of the callbacks run when the simulation resumes (Python does the rescheduling) */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *k_obj = PyLong_FromSsize_t(k);
                PyObject *done = k_obj ? PyObject_CallMethodObjArgs(env, str_after_stop, event, callbacks, k_obj, NULL)
                                       : NULL;
                Py_XDECREF(k_obj);
                if (done == NULL) {
                    Py_XDECREF(type);
                    Py_XDECREF(value);
                    Py_XDECREF(tb);
                } else {
                    Py_DECREF(done);
                    PyErr_Restore(type, value, tb);
                }
            }
            Py_DECREF(callbacks);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(callbacks);
    PyObject *ok = PyObject_GetAttr(event, str_ok);
    if (ok == NULL)
        return -1;
    int is_ok = PyObject_IsTrue(ok);
    Py_DECREF(ok);
    if (is_ok < 0)
        return -1;
    if (!is_ok) {
        int defused = PyObject_HasAttr(event, str_defused);
        if (!defused) {
            /* raises the event's failure */
            PyObject *r = PyObject_CallMethodOneArg(env, str_unhandled, event);
            Py_XDECREF(r);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(advance_doc,
"advance(env, before, limit) -> None\n\n"
"Process every entry of env._queue due before `before` (its time < before), in order; at most `limit` of\n"
"them when limit is not negative. A function or bound method is called; a SimPy event's callbacks run.");

static PyObject *
advance(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "advance(env, before, limit) takes 3 arguments");
        return NULL;
    }
    PyObject *env = args[0], *before = args[1];
    long long limit = PyLong_AsLongLong(args[2]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    PyObject *queue = PyObject_GetAttr(env, str_queue);
    if (queue == NULL)
        return NULL;
    if (!PyList_Check(queue)) {
        Py_DECREF(queue);
        PyErr_SetString(PyExc_TypeError, "the environment's queue must be a list");
        return NULL;
    }
    while (PyList_GET_SIZE(queue) > 0 && limit != 0) {
        PyObject *head = PyList_GET_ITEM(queue, 0);
        if (!PyTuple_Check(head) || PyTuple_GET_SIZE(head) != 4) {
            PyErr_SetString(PyExc_TypeError, "a queue entry must be (time, priority, id, item)");
            goto error;
        }
        int due = PyObject_RichCompareBool(PyTuple_GET_ITEM(head, 0), before, Py_LT);
        if (due < 0)
            goto error;
        if (!due)
            break;
        limit--;
        PyObject *entry = PyObject_CallOneArg(heappop, queue);
        if (entry == NULL)
            goto error;
        PyObject *item = PyTuple_GET_ITEM(entry, 3);
        Py_INCREF(item);
        int failed = PyObject_SetAttr(env, str_now, PyTuple_GET_ITEM(entry, 0)) < 0;
        Py_DECREF(entry);
        if (!failed) {
            if (PyFunction_Check(item) || PyMethod_Check(item)) {
                PyObject *r = PyObject_CallNoArgs(item);
                failed = r == NULL;
                Py_XDECREF(r);
            } else {
                failed = run_callbacks(env, item) < 0;
            }
        }
        Py_DECREF(item);
        if (failed)
            goto error;
    }
    Py_DECREF(queue);
    Py_RETURN_NONE;
error:
    Py_DECREF(queue);
    return NULL;
}

static PyMethodDef methods[] = {
    {"advance", (PyCFunction)(void (*)(void))advance, METH_FASTCALL, advance_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scheduler_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._scheduler",
    .m_doc = "The rig model's event loop (Engine.advance) in C.",
    .m_size = -1,
    .m_methods = methods,
};

static PyObject *
attr_of(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL)
        return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

PyMODINIT_FUNC
PyInit__scheduler(void)
{
    if ((heappop = attr_of("_heapq", "heappop")) == NULL)
        return NULL;
    if ((stop_simulation = attr_of("simpy.core", "StopSimulation")) == NULL)
        return NULL;
    if (!(str_queue = PyUnicode_InternFromString("_queue")) || !(str_now = PyUnicode_InternFromString("_now"))
        || !(str_callbacks = PyUnicode_InternFromString("callbacks")) || !(str_ok = PyUnicode_InternFromString("_ok"))
        || !(str_defused = PyUnicode_InternFromString("_defused"))
        || !(str_after_stop = PyUnicode_InternFromString("_after_stop"))
        || !(str_unhandled = PyUnicode_InternFromString("_unhandled")))
        return NULL;
    return PyModule_Create(&scheduler_module);
}
