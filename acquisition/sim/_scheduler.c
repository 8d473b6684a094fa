/* The loop that runs the rig model's events (acquisition/sim/scheduler.py, Engine.advance), in C.
 *
 * It does what the Python loop did, step for step, so the order of everything is
 * unchanged: take the first (time, priority, id, item) entry off the queue (a heap,
 * popped as heapq.heappop does), set the environment's _now, then either call the item
 * (a plain function or bound method, Python's or C's, queued by Engine.call_in) or run a SimPy event's
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
 *
 * resume() is a process's step (scheduler.py's Process._resume), the generator driven to its next wait with
 * the same entries queued at the same moments; a Process's _wake is it, bound to the process, so the queue
 * and events' callbacks call it with no Python frame between.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX: what a __slots__ member holds */

static PyObject *stop_simulation; /* simpy.core.StopSimulation */
static PyObject *normal;          /* simpy.events.NORMAL, the priority of a process's delay and end */
static PyObject *describe_frame;  /* simpy.events._describe_frame, for an invalid yield's message */
static PyObject *zero;
static PyObject *str_queue, *str_now, *str_callbacks, *str_ok, *str_defused, *str_after_stop, *str_unhandled;
static PyObject *str_value, *str_next,
    *str_then, *str_args, *str_cause, *str_send, *str_throw, *str_append, *str_gi_frame, *str_stop_value;
/* scheduler.py's Signal and Later, given by bind() when scheduler.py is imported (this module cannot import
 * scheduler.py, which imports it) */
static PyObject *signal_class, *later_class;

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
    /* the last entry taken off with the list's reference to it, as list.pop() does but without resizing the
     * list's storage (PyList_SetSlice's general path was ~100 instructions a pop; the queue stays small) */
    PyObject *last = PyList_GET_ITEM(heap, n - 1);
    Py_SET_SIZE(heap, n - 1);
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

/* heapq.heappush onto a list: 0, or -1 with an exception set. */
static int
heap_push(PyObject *heap, PyObject *entry)
{
    if (PyList_Append(heap, entry) < 0)
        return -1;
    return sift_down((PyListObject *)heap, 0, PyList_GET_SIZE(heap) - 1);
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
    if (heap_push(heap, args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The attributes advance() and resume() use on every step are __slots__ of scheduler.py's Engine and Process
 * (bind() finds where they are): read and written at their offsets, as a C struct's fields, where getattr and
 * setattr would look each up in the type's MRO and then the instance, which cost as much as the Python frame
 * resume() replaces. Python's own code reads them as fast as before (a slot is as fast as an instance
 * attribute to its specialised bytecode). */
static PyTypeObject *engine_type, *process_type;
static Py_ssize_t at_now, at_queue, at_eid, at_active_proc; /* Engine's */
static Py_ssize_t at_env, at_generator, at_target, at_wake; /* Process's */
#define SLOT(obj, at) (*(PyObject **)((char *)(obj) + (at)))

/* obj's slot at `at` (a new reference), or NULL with AttributeError set if it was never set. */
static PyObject *
slot_get(PyObject *obj, Py_ssize_t at, const char *name)
{
    PyObject *v = SLOT(obj, at);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'", Py_TYPE(obj)->tp_name, name);
        return NULL;
    }
    return Py_NewRef(v);
}

/* Set obj's slot at `at` to v. */
static void
slot_set(PyObject *obj, Py_ssize_t at, PyObject *v)
{
    Py_XSETREF(SLOT(obj, at), Py_NewRef(v));
}

/* Whether a triggered SimPy event succeeded (its _ok is true): 1 or 0, or -1 with an exception set. */
static int
event_ok(PyObject *event)
{
    PyObject *ok = PyObject_GetAttr(event, str_ok);
    if (ok == NULL)
        return -1;
    int is_ok = PyObject_IsTrue(ok);
    Py_DECREF(ok);
    return is_ok;
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
    int is_ok = event_ok(event);
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
    int is_engine = engine_type != NULL && PyObject_TypeCheck(env, engine_type);
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
        /* owned across the comparison, which can run Python code that changes the queue */
        Py_INCREF(head);
        int due = PyObject_RichCompareBool(PyTuple_GET_ITEM(head, 0), before, Py_LT);
        if (due <= 0) {
            Py_DECREF(head);
            if (due < 0)
                goto error;
            break;
        }
        limit--;
        PyObject *entry = PyList_GET_SIZE(queue) > 0 && PyList_GET_ITEM(queue, 0) == head ? heap_pop(queue) : NULL;
        Py_DECREF(head);
        if (entry != head) {
            if (entry != NULL || !PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "the event queue's head changed during a comparison");
            Py_XDECREF(entry);
            goto error;
        }
        PyObject *item = PyTuple_GET_ITEM(entry, 3);
        Py_INCREF(item);
        int failed = 0;
        if (is_engine)
            slot_set(env, at_now, PyTuple_GET_ITEM(entry, 0));
        else
            failed = PyObject_SetAttr(env, str_now, PyTuple_GET_ITEM(entry, 0)) < 0;
        Py_DECREF(entry);
        if (!failed) {
            /* a call: a function, a method, or a C function or method (a Signal's notify, say) */
            if (PyFunction_Check(item) || PyMethod_Check(item) || PyCFunction_Check(item)) {
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

/* Push (env._now + delay, priority, next(env._eid), item) onto env._queue (delay NULL: now), as scheduler.py's
 * _push calls do; env is an Engine. 0, or -1 with an exception set. */
static int
schedule(PyObject *env, PyObject *delay, PyObject *priority, PyObject *item)
{
    PyObject *queue = slot_get(env, at_queue, "_queue");
    if (queue == NULL)
        return -1;
    int r = -1;
    PyObject *at = NULL, *counter = NULL, *eid = NULL, *entry = NULL;
    if (!PyList_Check(queue)) {
        PyErr_SetString(PyExc_TypeError, "the environment's queue must be a list");
        goto done;
    }
    if ((at = slot_get(env, at_now, "_now")) == NULL)
        goto done;
    if (delay != NULL) {
        PyObject *sum = PyNumber_Add(at, delay);
        Py_SETREF(at, sum);
        if (at == NULL)
            goto done;
    }
    if ((counter = slot_get(env, at_eid, "_eid")) == NULL)
        goto done;
    /* next(counter): an iterator that ends raises StopIteration, as next() does (an itertools.count never ends) */
    if ((eid = PyIter_Next(counter)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        goto done;
    }
    if ((entry = PyTuple_Pack(4, at, priority, eid, item)) == NULL)
        goto done;
    r = heap_push(queue, entry);
done:
    Py_XDECREF(entry);
    Py_XDECREF(eid);
    Py_XDECREF(counter);
    Py_XDECREF(at);
    Py_DECREF(queue);
    return r;
}

/* What a process is given from a triggered event: *send, its value (a new reference), if it succeeded; else
 * *thrown, a copy of its exception whose __cause__ is the original (a new reference), the event defused, as
 * SimPy's Process._resume does. 0, or -1 with an exception set. */
static int
outcome_of(PyObject *event, PyObject **send, PyObject **thrown)
{
    int is_ok = event_ok(event);
    if (is_ok < 0)
        return -1;
    if (is_ok)
        return (*send = PyObject_GetAttr(event, str_value)) == NULL ? -1 : 0;
    if (PyObject_SetAttr(event, str_defused, Py_True) < 0)
        return -1;
    PyObject *failure = PyObject_GetAttr(event, str_value);
    if (failure == NULL)
        return -1;
    /* type(failure)(*failure.args) */
    PyObject *args = PyObject_GetAttr(failure, str_args), *copy = NULL;
    if (args != NULL) {
        PyObject *tuple = PySequence_Tuple(args);
        Py_DECREF(args);
        if (tuple != NULL) {
            copy = PyObject_Call((PyObject *)Py_TYPE(failure), tuple, NULL);
            Py_DECREF(tuple);
        }
    }
    if (copy != NULL && PyObject_SetAttr(copy, str_cause, failure) < 0)
        Py_CLEAR(copy);
    Py_DECREF(failure);
    *thrown = copy;
    return copy == NULL ? -1 : 0;
}

/* One step of a generator: generator.send(send), or generator.throw(thrown) when thrown is not NULL.
 * PYGEN_NEXT with *out what it yielded, PYGEN_RETURN with *out what it returned (StopIteration's value), or
 * PYGEN_ERROR with the exception it raised set; *out is a new reference. A generator is sent to with
 * PyIter_Send, which returns its value without making a StopIteration; any other object with send and
 * throw (Process takes one) has them called, as Python's code called them. */
static PySendResult
generator_step(PyObject *generator, PyObject *send, PyObject *thrown, PyObject **out)
{
    *out = NULL;
    if (thrown == NULL && PyGen_CheckExact(generator))
        return PyIter_Send(generator, send, out);
    PyObject *r = thrown != NULL ? PyObject_CallMethodOneArg(generator, str_throw, thrown)
                                 : PyObject_CallMethodOneArg(generator, str_send, send);
    if (r != NULL) {
        *out = r;
        return PYGEN_NEXT;
    }
    if (!PyErr_ExceptionMatches(PyExc_StopIteration))
        return PYGEN_ERROR;
    PyObject *type, *stop, *tb;
    PyErr_Fetch(&type, &stop, &tb);
    PyErr_NormalizeException(&type, &stop, &tb);
    *out = stop != NULL ? PyObject_GetAttr(stop, str_stop_value) : NULL;
    Py_XDECREF(type);
    Py_XDECREF(stop);
    Py_XDECREF(tb);
    return *out != NULL ? PYGEN_RETURN : PYGEN_ERROR;
}

/* The RuntimeError SimPy raises for a yield of something that is no event (target.callbacks raised the
 * AttributeError that is set): from None, the AttributeError its context, as Python's ``raise ... from
 * None`` in the except clause made it. */
static void
invalid_yield(PyObject *generator, PyObject *target)
{
    PyObject *type, *missing, *tb;
    PyErr_Fetch(&type, &missing, &tb);
    PyErr_NormalizeException(&type, &missing, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyObject *frame = PyObject_GetAttr(generator, str_gi_frame), *where = NULL, *message = NULL, *error = NULL;
    if (frame != NULL)
        where = PyObject_CallOneArg(describe_frame, frame);
    if (where != NULL)
        message = PyUnicode_FromFormat("\n%SInvalid yield value \"%S\"", where, target);
    if (message != NULL)
        error = PyObject_CallOneArg(PyExc_RuntimeError, message);
    Py_XDECREF(frame);
    Py_XDECREF(where);
    Py_XDECREF(message);
    if (error == NULL) {
        Py_XDECREF(missing);
        return;
    }
    PyException_SetContext(error, missing); /* steals missing */
    PyException_SetCause(error, NULL);      /* "from None": also sets __suppress_context__ */
    /* PyErr_Restore, not PyErr_SetObject, which would make the exception being handled (if any) its context */
    Py_INCREF(PyExc_RuntimeError);
    PyErr_Restore(PyExc_RuntimeError, error, NULL);
}

PyDoc_STRVAR(resume_doc,
"resume(process, event=None) -> None\n\n"
"Run a scheduler.Process's generator to its next wait: sent event's value (thrown a copy of its failure),\n"
"or None when event is None (its start, a delay's end). Process._resume, in C.");

/* Process._resume, step for step as the Python it replaces (scheduler.py's Process docstring says what SimPy
 * schedules and what this does in its place): a Python frame a resume, ~30 a simulated frame, was ~6% of
 * the model's instructions. Until it returns, env.active_process is the process; an error that is not the
 * generator's own (a Later of another process, a yield of something that is no event) propagates with it
 * still set, as it did. */
static PyObject *
resume(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "resume(process, event=None) takes 1 or 2 arguments");
        return NULL;
    }
    if (process_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "resume() before bind()");
        return NULL;
    }
    PyObject *self = args[0], *event = nargs == 2 ? args[1] : Py_None;
    if (!PyObject_TypeCheck(self, process_type)) {
        PyErr_SetString(PyExc_TypeError, "resume() takes a scheduler.Process");
        return NULL;
    }
    PyObject *env = slot_get(self, at_env, "env");
    if (env == NULL)
        return NULL;
    PyObject *generator = NULL, *wake = NULL, *send = NULL, *thrown = NULL, *target = NULL;
    if (!PyObject_TypeCheck(env, engine_type)) {
        PyErr_SetString(PyExc_TypeError, "a scheduler.Process runs in a scheduler.Engine");
        goto error;
    }
    slot_set(env, at_active_proc, self);
    if ((generator = slot_get(self, at_generator, "_generator")) == NULL
        || (wake = slot_get(self, at_wake, "_wake")) == NULL)
        goto error;
    if (event != Py_None && outcome_of(event, &send, &thrown) < 0)
        goto error;
    for (;;) {
        PySendResult step = generator_step(generator, send != NULL ? send : Py_None, thrown, &target);
        Py_CLEAR(send);
        Py_CLEAR(thrown);
        if (step == PYGEN_RETURN) {
            /* the process succeeds with what the generator returned */
            int failed = PyObject_SetAttr(self, str_ok, Py_True) < 0 || PyObject_SetAttr(self, str_value, target) < 0;
            Py_CLEAR(target);
            if (failed)
                goto error;
            break;
        }
        if (step == PYGEN_ERROR) {
            /* the process fails with the generator's exception; its traceback starts in the generator (no frame
             * of this function is in it: Python's code dropped its own, as SimPy's does) */
            PyObject *type, *error, *tb;
            PyErr_Fetch(&type, &error, &tb);
            PyErr_NormalizeException(&type, &error, &tb);
            int failed = PyException_SetTraceback(error, tb != NULL ? tb : Py_None) < 0
                         || PyObject_SetAttr(self, str_ok, Py_False) < 0 || PyObject_SetAttr(self, str_value, error) < 0;
            Py_XDECREF(type);
            Py_XDECREF(error);
            Py_XDECREF(tb);
            if (failed)
                goto error;
            break;
        }
        if (PyLong_CheckExact(target)) {
            /* a delay (ps): this process resumes then, queued where SimPy's Timeout would be */
            int negative = PyObject_RichCompareBool(target, zero, Py_LT);
            if (negative < 0)
                goto error;
            if (!negative) {
                if (schedule(env, target, normal, wake) < 0)
                    goto error;
                slot_set(self, at_target, Py_None);
                goto waiting;
            }
            /* thrown in at once: the ValueError SimPy's Timeout raises */
            PyObject *message = PyUnicode_FromFormat("Negative delay %S", target);
            Py_CLEAR(target);
            if (message == NULL)
                goto error;
            thrown = PyObject_CallOneArg(PyExc_ValueError, message);
            Py_DECREF(message);
            if (thrown == NULL)
                goto error;
            continue;
        }
        if (Py_TYPE(target) == (PyTypeObject *)signal_class) {
            /* its next notify queues this process */
            if (PyObject_SetAttr(target, str_next, wake) < 0)
                goto error;
            slot_set(self, at_target, target);
            goto waiting;
        }
        if (Py_TYPE(target) == (PyTypeObject *)later_class) {
            /* it queues (or queued) its maker's resumption: this process must be that maker */
            PyObject *then = PyObject_GetAttr(target, str_then);
            if (then == NULL)
                goto error;
            Py_DECREF(then); /* only its identity is compared; target still holds it */
            if (then != wake) {
                PyErr_Format(PyExc_RuntimeError, "%S was made by another process", target);
                goto error;
            }
            slot_set(self, at_target, target);
            goto waiting;
        }
        PyObject *callbacks = PyObject_GetAttr(target, str_callbacks);
        if (callbacks == NULL) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError))
                invalid_yield(generator, target);
            goto error;
        }
        if (callbacks != Py_None) {
            /* an event not yet processed: this process is its next callback */
            int failed;
            if (PyList_CheckExact(callbacks)) {
                failed = PyList_Append(callbacks, wake) < 0;
            } else {
                PyObject *r = PyObject_CallMethodOneArg(callbacks, str_append, wake);
                failed = r == NULL;
                Py_XDECREF(r);
            }
            Py_DECREF(callbacks);
            if (failed)
                goto error;
            slot_set(self, at_target, target);
            goto waiting;
        }
        Py_DECREF(callbacks);
        /* an event already processed: its outcome goes in at once, in this same step */
        int failed = outcome_of(target, &send, &thrown) < 0;
        Py_CLEAR(target);
        if (failed)
            goto error;
    }
    /* the generator ended: the process, an event, is due now */
    if (schedule(env, NULL, normal, self) < 0)
        goto error;
    slot_set(self, at_target, Py_None);
waiting:
    Py_CLEAR(target);
    slot_set(env, at_active_proc, Py_None);
    Py_DECREF(wake);
    Py_DECREF(generator);
    Py_DECREF(env);
    Py_RETURN_NONE;
error:
    Py_XDECREF(target);
    Py_XDECREF(send);
    Py_XDECREF(thrown);
    Py_XDECREF(wake);
    Py_XDECREF(generator);
    Py_DECREF(env);
    return NULL;
}

/* The model's CPU (scheduler.py's Cpu, SimPy 4.1's PriorityResource of capacity one as the model uses it):
 * its request, the request's release (CpuRequest.__exit__) and the release's grant of the next waiter, in C,
 * entry for entry as the Python they replace (scheduler.py's Cpu docstring says what SimPy schedules and what
 * is queued in its place). Each use of the CPU ran five Python frames (request, CpuRequest.__init__, _grant,
 * __exit__ and the queued _grant_next), ~4 uses a simulated message. A Cpu's attributes are __slots__,
 * read and written at their offsets (bind_methods() finds them); a CpuRequest is a SimPy event, whose
 * attributes are in its __dict__. Waiting requests are a heapq heap of (priority, order, request): pushed and
 * popped by heapq itself (only when the CPU is busy; the order is unique, so no request is compared). */
static Py_ssize_t slot_offset(PyObject *cls, const char *name);
static PyTypeObject *cpu_type, *cpu_request_type;
static Py_ssize_t at_cpu_env, at_cpu_user, at_cpu_busy, at_cpu_waiting, at_cpu_order, at_cpu_release;
static PyObject *pending, *urgent, *heappush_fn, *heappop_fn, *heapify_fn; /* simpy.events' and heapq's */
static PyObject *str_env, *str_cpu;

/* Cpu._grant: give the CPU to req, its event due now (Event.succeed()'s schedule: NORMAL). 0, or -1. */
static int
cpu_grant(PyObject *cpu, PyObject *req)
{
    PyObject *env = SLOT(cpu, at_cpu_env), *busy = SLOT(cpu, at_cpu_busy);
    if (env == NULL || !PyObject_TypeCheck(env, engine_type) || busy == NULL || !PyList_Check(busy)) {
        PyErr_SetString(PyExc_TypeError, "a Cpu's env must be an Engine and its busy a list");
        return -1;
    }
    slot_set(cpu, at_cpu_user, req);
    PyObject *now = SLOT(env, at_now);
    if (now == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the environment has no _now");
        return -1;
    }
    if (PyObject_SetAttr(req, str_ok, Py_True) < 0 || PyObject_SetAttr(req, str_value, Py_None) < 0
        || PyList_Append(busy, now) < 0)
        return -1;
    return schedule(env, NULL, normal, req);
}

/* Cpu._grant_next: grant the first waiting request if the CPU is free (heappop(waiting)[2]). 0, or -1. */
static int
cpu_grant_waiting(PyObject *cpu)
{
    PyObject *waiting = SLOT(cpu, at_cpu_waiting);
    if (waiting == NULL || !PyList_Check(waiting)) {
        PyErr_SetString(PyExc_TypeError, "a Cpu's waiting must be a list");
        return -1;
    }
    if (SLOT(cpu, at_cpu_user) != Py_None || PyList_GET_SIZE(waiting) == 0)
        return 0;
    PyObject *first = PyObject_CallOneArg(heappop_fn, waiting);
    if (first == NULL)
        return -1;
    int r = -1;
    if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) != 3)
        PyErr_SetString(PyExc_TypeError, "a waiting request must be (priority, order, request)");
    else
        r = cpu_grant(cpu, PyTuple_GET_ITEM(first, 2));
    Py_DECREF(first);
    return r;
}

static int
check_cpu(PyObject *cpu)
{
    if (cpu_type != NULL && PyObject_TypeCheck(cpu, cpu_type))
        return 0;
    PyErr_SetString(PyExc_TypeError, cpu_type == NULL ? "the CPU's methods before bind_methods()" : "not a scheduler.Cpu");
    return -1;
}

PyDoc_STRVAR(cpu_request_doc,
"request(priority=0) -> CpuRequest\n\n"
"A request for the CPU at `priority` (lower first), granted now if the CPU is free.");

static PyObject *
cpu_request(PyObject *cpu, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (check_cpu(cpu) < 0)
        return NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *priority = zero;
    if (nargs + nkw > 1 || (nkw == 1 && !_PyUnicode_EqualToASCIIString(PyTuple_GET_ITEM(kwnames, 0), "priority"))) {
        PyErr_SetString(PyExc_TypeError, "request() takes one argument, priority");
        return NULL;
    }
    if (nargs + nkw == 1)
        priority = args[0];
    PyObject *env = SLOT(cpu, at_cpu_env), *waiting = SLOT(cpu, at_cpu_waiting), *user = SLOT(cpu, at_cpu_user);
    if (env == NULL || waiting == NULL || !PyList_Check(waiting) || user == NULL) {
        PyErr_SetString(PyExc_TypeError, "a Cpu needs its env, user and waiting list");
        return NULL;
    }
    /* CpuRequest(cpu), without a Python __init__: its attributes in the order that set them */
    PyObject *callbacks = NULL, *req = cpu_request_type->tp_alloc(cpu_request_type, 0);
    if (req == NULL || (callbacks = PyList_New(0)) == NULL || PyObject_SetAttr(req, str_env, env) < 0
        || PyObject_SetAttr(req, str_callbacks, callbacks) < 0 || PyObject_SetAttr(req, str_value, pending) < 0
        || PyObject_SetAttr(req, str_cpu, cpu) < 0)
        goto error;
    Py_CLEAR(callbacks);
    if (user == Py_None && PyList_GET_SIZE(waiting) == 0) {
        if (cpu_grant(cpu, req) < 0)
            goto error;
        return req;
    }
    PyObject *order = PyIter_Next(SLOT(cpu, at_cpu_order));
    if (order == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        goto error;
    }
    PyObject *entry = PyTuple_Pack(3, priority, order, req);
    Py_DECREF(order);
    PyObject *pushed = entry == NULL ? NULL : PyObject_CallFunctionObjArgs(heappush_fn, waiting, entry, NULL);
    Py_XDECREF(entry);
    if (pushed == NULL)
        goto error;
    Py_DECREF(pushed);
    if (cpu_grant_waiting(cpu) < 0)
        goto error;
    return req;
error:
    Py_XDECREF(callbacks);
    Py_XDECREF(req);
    return NULL;
}

PyDoc_STRVAR(cpu_grant_next_doc,
"_grant_next(cpu) -> None\n\n"
"What the Release event's callback does: grant the first waiting request if the CPU is free (a release\n"
"queues it bound to its Cpu).");

static PyObject *
cpu_grant_next(PyObject *Py_UNUSED(module), PyObject *cpu)
{
    if (check_cpu(cpu) < 0 || cpu_grant_waiting(cpu) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(cpu_request_enter_doc, "__enter__() -> the request itself");

static PyObject *
cpu_request_enter(PyObject *self, PyObject *Py_UNUSED(arg))
{
    return Py_NewRef(self);
}

PyDoc_STRVAR(cpu_request_exit_doc,
"__exit__(exc_type, exc, traceback) -> None\n\n"
"Withdraw the request if it is still waiting (an exception while waiting), and release the CPU unless the\n"
"generator is being closed, as SimPy's Request.__exit__: the Release event made now is the Cpu's\n"
"_grant_next queued now, NORMAL.");

static PyObject *
cpu_request_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__(exc_type, exc, traceback) takes 3 arguments");
        return NULL;
    }
    PyObject *cpu = PyObject_GetAttr(self, str_cpu), *value = NULL, *env = NULL;
    if (cpu == NULL)
        return NULL;
    if (check_cpu(cpu) < 0 || (value = PyObject_GetAttr(self, str_value)) == NULL)
        goto error;
    if (value == pending) {
        /* cpu.waiting = [w for w in cpu.waiting if w[2] is not self]; heapify(cpu.waiting) */
        PyObject *waiting = SLOT(cpu, at_cpu_waiting), *kept = PyList_New(0);
        if (kept == NULL)
            goto error;
        Py_ssize_t n = waiting != NULL && PyList_Check(waiting) ? PyList_GET_SIZE(waiting) : 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *w = PyList_GET_ITEM(waiting, i);
            if (PyTuple_Check(w) && PyTuple_GET_SIZE(w) == 3 && PyTuple_GET_ITEM(w, 2) == self)
                continue;
            if (PyList_Append(kept, w) < 0) {
                Py_DECREF(kept);
                goto error;
            }
        }
        slot_set(cpu, at_cpu_waiting, kept);
        PyObject *r = PyObject_CallOneArg(heapify_fn, kept);
        Py_DECREF(kept);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    if (args[0] != PyExc_GeneratorExit) {
        if ((env = PyObject_GetAttr(self, str_env)) == NULL)
            goto error;
        if (!PyObject_TypeCheck(env, engine_type)) {
            PyErr_SetString(PyExc_TypeError, "a request's env must be an Engine");
            goto error;
        }
        if (SLOT(cpu, at_cpu_user) == self) {
            PyObject *busy = SLOT(cpu, at_cpu_busy), *now = SLOT(env, at_now);
            slot_set(cpu, at_cpu_user, Py_None);
            if (busy == NULL || !PyList_Check(busy) || now == NULL) {
                PyErr_SetString(PyExc_TypeError, "a Cpu's busy must be a list, its env's _now set");
                goto error;
            }
            if (PyList_Append(busy, now) < 0)
                goto error;
        }
        PyObject *release = SLOT(cpu, at_cpu_release);
        if (release == NULL) {
            PyErr_SetString(PyExc_AttributeError, "a Cpu needs its _release_call");
            goto error;
        }
        if (schedule(env, NULL, normal, release) < 0)
            goto error;
    }
    Py_XDECREF(env);
    Py_DECREF(value);
    Py_DECREF(cpu);
    Py_RETURN_NONE;
error:
    Py_XDECREF(env);
    Py_XDECREF(value);
    Py_DECREF(cpu);
    return NULL;
}

/* Signal.notify (scheduler.py), ~9 a simulated message: the waiting process's resumption queued now (a
 * call: a function or method, as Signal.notify tells them from a SimPy event by their exact class), or the
 * SimPy event of a wait() succeeded; nothing if it was announced since the last wait. Signal's _env and
 * _next are __slots__ (bind_methods() finds them). */
static Py_ssize_t at_signal_env, at_signal_next;
static PyObject *str_succeed;

PyDoc_STRVAR(signal_notify_doc,
"notify() -> None\n\n"
"Announce the condition: whoever waits resumes now (after what is queued before).");

static PyObject *
signal_notify(PyObject *self, PyObject *Py_UNUSED(arg))
{
    if (!PyObject_TypeCheck(self, (PyTypeObject *)signal_class)) {
        PyErr_SetString(PyExc_TypeError, "notify() takes a scheduler.Signal");
        return NULL;
    }
    PyObject *then = SLOT(self, at_signal_next), *r;
    if (then == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a Signal needs its _next");
        return NULL;
    }
    if (then == Py_None)
        Py_RETURN_NONE;
    Py_INCREF(then);
    slot_set(self, at_signal_next, Py_None);
    if (Py_IS_TYPE(then, &PyFunction_Type) || Py_IS_TYPE(then, &PyMethod_Type)) {
        PyObject *env = SLOT(self, at_signal_env);
        if (env == NULL || !PyObject_TypeCheck(env, engine_type)) {
            PyErr_SetString(PyExc_TypeError, "a Signal's _env must be an Engine");
            r = NULL;
        } else {
            r = schedule(env, NULL, normal, then) < 0 ? NULL : Py_NewRef(Py_None);
        }
    } else {
        r = PyObject_CallMethodNoArgs(then, str_succeed);
    }
    Py_DECREF(then);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyMethodDef signal_notify_def = {"notify", (PyCFunction)signal_notify, METH_NOARGS, signal_notify_doc};
static PyMethodDef cpu_request_def = {"request", (PyCFunction)(void (*)(void))cpu_request,
                                      METH_FASTCALL | METH_KEYWORDS, cpu_request_doc};
static PyMethodDef cpu_request_enter_def = {"__enter__", (PyCFunction)cpu_request_enter, METH_NOARGS,
                                            cpu_request_enter_doc};
static PyMethodDef cpu_request_exit_def = {"__exit__", (PyCFunction)(void (*)(void))cpu_request_exit, METH_FASTCALL,
                                           cpu_request_exit_doc};

PyDoc_STRVAR(bind_methods_doc,
"bind_methods(cpu, cpu_request) -> None\n\n"
"Give scheduler.py's Cpu its request(), CpuRequest its __enter__ and __exit__ and Signal (bind()'s) its notify():\n"
"methods of those classes, in C; the offsets of Cpu's __slots__ env, user, busy, waiting, _order and\n"
"_release_call, and Signal's _env and _next.");

static PyObject *
bind_methods(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind_methods(cpu, cpu_request) takes 2 classes");
        return NULL;
    }
    if (engine_type == NULL || signal_class == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_methods() before bind()");
        return NULL;
    }
    PyObject *cpu = args[0], *request = args[1];
    Py_ssize_t env, user, busy, waiting, order, release, signal_env, signal_next;
    if ((env = slot_offset(cpu, "env")) < 0 || (user = slot_offset(cpu, "user")) < 0
        || (busy = slot_offset(cpu, "busy")) < 0 || (waiting = slot_offset(cpu, "waiting")) < 0
        || (order = slot_offset(cpu, "_order")) < 0 || (release = slot_offset(cpu, "_release_call")) < 0
        || (signal_env = slot_offset(signal_class, "_env")) < 0 || (signal_next = slot_offset(signal_class, "_next")) < 0)
        return NULL;
    PyObject *methods[4] = {PyDescr_NewMethod((PyTypeObject *)cpu, &cpu_request_def),
                            PyDescr_NewMethod((PyTypeObject *)request, &cpu_request_enter_def),
                            PyDescr_NewMethod((PyTypeObject *)request, &cpu_request_exit_def),
                            PyDescr_NewMethod((PyTypeObject *)signal_class, &signal_notify_def)};
    int failed = methods[0] == NULL || methods[1] == NULL || methods[2] == NULL || methods[3] == NULL
                 || PyObject_SetAttrString(cpu, "request", methods[0]) < 0
                 || PyObject_SetAttrString(request, "__enter__", methods[1]) < 0
                 || PyObject_SetAttrString(request, "__exit__", methods[2]) < 0
                 || PyObject_SetAttrString(signal_class, "notify", methods[3]) < 0;
    for (int i = 0; i < 4; i++)
        Py_XDECREF(methods[i]);
    if (failed)
        return NULL;
    at_cpu_env = env, at_cpu_user = user, at_cpu_busy = busy, at_cpu_waiting = waiting, at_cpu_order = order;
    at_cpu_release = release, at_signal_env = signal_env, at_signal_next = signal_next;
    Py_XSETREF(cpu_type, (PyTypeObject *)Py_NewRef(cpu));
    Py_XSETREF(cpu_request_type, (PyTypeObject *)Py_NewRef(request));
    Py_RETURN_NONE;
}

/* after_timeout (scheduler.py): the two queued calls that take the place of a process waiting one timeout.
 * The first is after_step bound to (env, delay_ps, then): a method object, which advance() calls as it calls
 * any queued method, with no Python frame; it queues `then` delay_ps() from now, as Engine.call_in does. */
static PyObject *
after_step(PyObject *Py_UNUSED(module), PyObject *bound)
{
    if (!PyTuple_Check(bound) || PyTuple_GET_SIZE(bound) != 3) {
        PyErr_SetString(PyExc_TypeError, "after_step() takes (env, delay_ps, then)");
        return NULL;
    }
    PyObject *env = PyTuple_GET_ITEM(bound, 0), *delay = PyObject_CallNoArgs(PyTuple_GET_ITEM(bound, 1));
    if (delay == NULL)
        return NULL;
    int negative = PyObject_RichCompareBool(delay, zero, Py_LT);
    if (negative > 0)
        PyErr_Format(PyExc_ValueError, "negative delay %R", delay);
    int r = negative != 0 ? -1 : schedule(env, delay, normal, PyTuple_GET_ITEM(bound, 2));
    Py_DECREF(delay);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef after_step_def = {"after_step", (PyCFunction)after_step, METH_O, NULL};
static PyObject *after_step_fn; /* it, as a function object (made once) */

PyDoc_STRVAR(after_timeout_doc,
"after_timeout(env, delay_ps, then) -> None\n\n"
"Queue, now and URGENT, a call that queues then() delay_ps() later (NORMAL); scheduler.after_timeout.");

static PyObject *
after_timeout(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "after_timeout(env, delay_ps, then) takes 3 arguments");
        return NULL;
    }
    if (engine_type == NULL || !PyObject_TypeCheck(args[0], engine_type)) {
        PyErr_SetString(PyExc_TypeError, "after_timeout() takes an Engine (after bind())");
        return NULL;
    }
    PyObject *bound = PyTuple_Pack(3, args[0], args[1], args[2]);
    PyObject *method = bound == NULL ? NULL : PyMethod_New(after_step_fn, bound);
    Py_XDECREF(bound);
    int r = method == NULL ? -1 : schedule(args[0], NULL, urgent, method);
    Py_XDECREF(method);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bind_doc,
"bind(signal, later, engine, process) -> None\n\n"
"Give resume() scheduler.py's Signal and Later classes, and where Engine's and Process's __slots__ are (this\n"
"module cannot import scheduler.py, which imports it).");

/* Where cls's __slots__ member `name` (an object slot) is: its offset, or -1 with an exception set. */
static Py_ssize_t
slot_offset(PyObject *cls, const char *name)
{
    PyObject *d = PyObject_GetAttrString(cls, name);
    if (d == NULL)
        return -1;
    Py_ssize_t at = -1;
    /* a member of cls or of a base only: another class's descriptor set on cls is an offset into its instances */
    if (Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
        && PyType_IsSubtype((PyTypeObject *)cls, PyDescr_TYPE(d)))
        at = ((PyMemberDescrObject *)d)->d_member->offset;
    else
        PyErr_Format(PyExc_TypeError, "%R.%s is not a __slots__ member", cls, name);
    Py_DECREF(d);
    return at;
}

static PyObject *
bind(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])
        || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "bind(signal, later, engine, process) takes 4 classes");
        return NULL;
    }
    PyObject *engine = args[2], *process = args[3];
    /* all found before any is changed: a failed bind leaves the last one whole */
    Py_ssize_t now, queue, eid, active_proc, env, generator, target, wake;
    if ((now = slot_offset(engine, "_now")) < 0 || (queue = slot_offset(engine, "_queue")) < 0
        || (eid = slot_offset(engine, "_eid")) < 0 || (active_proc = slot_offset(engine, "_active_proc")) < 0
        || (env = slot_offset(process, "env")) < 0 || (generator = slot_offset(process, "_generator")) < 0
        || (target = slot_offset(process, "_target")) < 0 || (wake = slot_offset(process, "_wake")) < 0)
        return NULL;
    at_now = now, at_queue = queue, at_eid = eid, at_active_proc = active_proc;
    at_env = env, at_generator = generator, at_target = target, at_wake = wake;
    Py_XSETREF(signal_class, Py_NewRef(args[0]));
    Py_XSETREF(later_class, Py_NewRef(args[1]));
    Py_XSETREF(engine_type, (PyTypeObject *)Py_NewRef(engine));
    Py_XSETREF(process_type, (PyTypeObject *)Py_NewRef(process));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"advance", (PyCFunction)(void (*)(void))advance, METH_FASTCALL, advance_doc},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"push", (PyCFunction)(void (*)(void))push, METH_FASTCALL, push_doc},
    {"resume", (PyCFunction)(void (*)(void))resume, METH_FASTCALL, resume_doc},
    {"bind_methods", (PyCFunction)(void (*)(void))bind_methods, METH_FASTCALL, bind_methods_doc},
    {"after_timeout", (PyCFunction)(void (*)(void))after_timeout, METH_FASTCALL, after_timeout_doc},
    {"_grant_next", (PyCFunction)cpu_grant_next, METH_O, cpu_grant_next_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scheduler_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._scheduler",
    .m_doc = "The rig model's event loop (Engine.advance) and process steps (Process._resume) in C.",
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

/* What other C modules of the model (_bus.c) use of this one, through a capsule: queueing an entry as the
 * queue's own pushes do (the same heap, the same comparisons, the same id counter), and finding a class's
 * slots. _bus.c declares the same struct. */
static struct {
    int (*schedule)(PyObject *env, PyObject *delay, PyObject *priority, PyObject *item);
    Py_ssize_t (*slot_offset)(PyObject *cls, const char *name);
} c_api = {schedule, slot_offset};

PyMODINIT_FUNC
PyInit__scheduler(void)
{
    if ((stop_simulation = attr_of("simpy.core", "StopSimulation")) == NULL
        || (normal = attr_of("simpy.events", "NORMAL")) == NULL
        || (describe_frame = attr_of("simpy.events", "_describe_frame")) == NULL || (zero = PyLong_FromLong(0)) == NULL
        || (pending = attr_of("simpy.events", "PENDING")) == NULL || (urgent = attr_of("simpy.events", "URGENT")) == NULL
        || (heappush_fn = attr_of("heapq", "heappush")) == NULL || (heappop_fn = attr_of("heapq", "heappop")) == NULL
        || (heapify_fn = attr_of("heapq", "heapify")) == NULL
        || (after_step_fn = PyCFunction_NewEx(&after_step_def, NULL, NULL)) == NULL)
        return NULL;
    if (!(str_queue = PyUnicode_InternFromString("_queue")) || !(str_now = PyUnicode_InternFromString("_now"))
        || !(str_callbacks = PyUnicode_InternFromString("callbacks")) || !(str_ok = PyUnicode_InternFromString("_ok"))
        || !(str_defused = PyUnicode_InternFromString("_defused"))
        || !(str_after_stop = PyUnicode_InternFromString("_after_stop"))
        || !(str_unhandled = PyUnicode_InternFromString("_unhandled"))
        || !(str_value = PyUnicode_InternFromString("_value"))
        || !(str_next = PyUnicode_InternFromString("_next")) || !(str_then = PyUnicode_InternFromString("_then"))
        || !(str_args = PyUnicode_InternFromString("args")) || !(str_cause = PyUnicode_InternFromString("__cause__"))
        || !(str_send = PyUnicode_InternFromString("send")) || !(str_throw = PyUnicode_InternFromString("throw"))
        || !(str_append = PyUnicode_InternFromString("append"))
        || !(str_gi_frame = PyUnicode_InternFromString("gi_frame"))
        || !(str_stop_value = PyUnicode_InternFromString("value")) || !(str_env = PyUnicode_InternFromString("env"))
        || !(str_cpu = PyUnicode_InternFromString("cpu")) || !(str_succeed = PyUnicode_InternFromString("succeed")))
        return NULL;
    PyObject *module = PyModule_Create(&scheduler_module);
    if (module == NULL)
        return NULL;
    PyObject *capsule = PyCapsule_New(&c_api, "nicrig.acquisition.sim._scheduler._C_API", NULL);
    if (capsule == NULL || PyModule_AddObject(module, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
