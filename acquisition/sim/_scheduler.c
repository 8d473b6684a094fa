/* The loop that runs the rig model's events (acquisition/sim/scheduler.py, Engine.advance), in C.
 *
 * It does what the Python loop did, step for step, so the order of everything is
 * unchanged: take the first (time, priority, id, item) entry off the queue (a heap,
 * popped as heapq.heappop does), set the environment's _now, then either call the item
 * (a plain function or bound method queued by Engine.call_in) or run a SimPy event's
 * callbacks, detached from it first, in order. The two rare endings go back to
 * Python: a StopSimulation from a callback (run(until=...)) and an event that failed
 * with nobody to handle it (Engine._after_stop, Engine._unhandled).
 *
 * The queue is a heap as the heapq module keeps it (SimPy's own events are pushed
 * with heapq.heappush), ordered by its entries' tuple order. push() and the loop's
 * pop are heapq's algorithms with one difference: entries whose time, priority and
 * id are all exact ints (every entry the model makes) are compared on those ints'
 * digits (int_cmp), instead of through the tuple and int rich comparisons, which
 * were a tenth of the model's instructions. Ids are unique, so the first three
 * fields always decide and the order is the tuples' own; any other entry (a float
 * time, say) is compared as tuples, as heapq compares it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *stop_simulation; /* simpy.core.StopSimulation */
static PyObject *str_queue, *str_now, *str_callbacks, *str_ok, *str_defused, *str_after_stop, *str_unhandled;

/* Compare two exact ints: -1, 0 or 1 as x <, == or > y; 2 when it cannot tell cheaply (the caller then
 * compares the tuples). Never raises.
 *
 * On CPython 3.11, from their digits (cpython/longintrepr.h, which Python.h includes): a signed digit
 * count orders ints of different lengths, and equal lengths compare from the most significant digit
 * (reversed for negatives), as CPython's own long_compare does; converting both to long long cost ~4x
 * as much, ~6 times a queue operation. Elsewhere (3.12 changed the layout), as long long. */
static inline int
int_cmp(PyObject *x, PyObject *y)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    Py_ssize_t sx = Py_SIZE(x), sy = Py_SIZE(y);
    if (sx != sy)
        return sx < sy ? -1 : 1;
    Py_ssize_t i = sx < 0 ? -sx : sx;
    const digit *dx = ((PyLongObject *)x)->ob_digit, *dy = ((PyLongObject *)y)->ob_digit;
    while (--i >= 0) {
        if (dx[i] != dy[i]) {
            int r = dx[i] < dy[i] ? -1 : 1;
            return sx < 0 ? -r : r;
        }
    }
    return 0;
#else
    int ox, oy;
    long long vx = PyLong_AsLongLongAndOverflow(x, &ox), vy = PyLong_AsLongLongAndOverflow(y, &oy);
    if (ox || oy)
        return 2;
    return vx < vy ? -1 : vx > vy;
#endif
}

/* a < b for two queue entries, in their tuples' order: 1 or 0, or -1 with an exception set.
 *
 * Field by field, as the tuple comparison goes: the same object is equal (small ints, such as the
 * priorities, are shared); two exact ints are compared by int_cmp; anything else (a float time, an
 * entry that is not a tuple of three or more) falls back to the tuples' own comparison. Entries' ids
 * are unique, so one of the first three fields always decides. */
static int
entry_lt(PyObject *a, PyObject *b)
{
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) >= 3 && PyTuple_GET_SIZE(b) >= 3) {
        for (int i = 0; i < 3; i++) {
            PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
            if (x == y)
                continue;
            if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y))
                break;
            int c = int_cmp(x, y);
            if (c == 2)
                break;
            if (c)
                return c < 0;
        }
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* heapq's _siftdown: move the entry at pos up towards startpos while it is less than its parent. */
static int
sift_down(PyListObject *heap, Py_ssize_t startpos, Py_ssize_t pos)
{
    Py_ssize_t size = PyList_GET_SIZE(heap);
    PyObject *newitem = heap->ob_item[pos];
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        PyObject *parent = heap->ob_item[parentpos];
        Py_INCREF(newitem);
        Py_INCREF(parent);
        int lt = entry_lt(newitem, parent);
        Py_DECREF(parent);
        Py_DECREF(newitem);
        if (lt < 0)
            return -1;
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "the event queue changed size during a comparison");
            return -1;
        }
        if (!lt)
            break;
        /* swap the two references: the list still owns exactly one of each */
        parent = heap->ob_item[parentpos];
        newitem = heap->ob_item[pos];
        heap->ob_item[parentpos] = newitem;
        heap->ob_item[pos] = parent;
        pos = parentpos;
    }
    return 0;
}

/* heapq's _siftup: move the smaller child up until a leaf is reached at pos, then sift the entry
 * that was at pos down into place (fewer comparisons than stopping early, as heapq explains). */
static int
sift_up(PyListObject *heap, Py_ssize_t pos)
{
    Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos;
    Py_ssize_t limit = endpos >> 1;
    while (pos < limit) {
        Py_ssize_t childpos = 2 * pos + 1;
        if (childpos + 1 < endpos) {
            PyObject *a = heap->ob_item[childpos], *b = heap->ob_item[childpos + 1];
            Py_INCREF(a);
            Py_INCREF(b);
            int lt = entry_lt(a, b);
            Py_DECREF(a);
            Py_DECREF(b);
            if (lt < 0)
                return -1;
            if (endpos != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "the event queue changed size during a comparison");
                return -1;
            }
            childpos += (lt == 0);
        }
        PyObject *tmp1 = heap->ob_item[childpos], *tmp2 = heap->ob_item[pos];
        heap->ob_item[childpos] = tmp2;
        heap->ob_item[pos] = tmp1;
        pos = childpos;
    }
    return sift_down(heap, startpos, pos);
}

/* heapq.heappop: the least entry (a new reference), or NULL with an exception set. */
static PyObject *
heap_pop(PyObject *heap)
{
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (n == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyObject *last = PyList_GET_ITEM(heap, n - 1);
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (n == 1)
        return last;
    PyObject *first = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, last); /* the list's reference to first passes to the caller */
    if (sift_up((PyListObject *)heap, 0) < 0) {
        Py_DECREF(first);
        return NULL;
    }
    return first;
}

PyDoc_STRVAR(push_doc,
"push(queue, entry) -> None\n\n"
"heapq.heappush(queue, entry), comparing (time, priority, id, ...) entries of ints in C.");

static PyObject *
push(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "push(queue, entry) takes 2 arguments");
        return NULL;
    }
    PyObject *heap = args[0];
    if (!PyList_Check(heap)) {
        PyErr_SetString(PyExc_TypeError, "the queue must be a list");
        return NULL;
    }
    if (PyList_Append(heap, args[1]) < 0)
        return NULL;
    if (sift_down((PyListObject *)heap, 0, PyList_GET_SIZE(heap) - 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

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
        PyObject *entry = heap_pop(queue);
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
    {"push", (PyCFunction)(void (*)(void))push, METH_FASTCALL, push_doc},
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
