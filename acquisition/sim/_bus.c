/* The rig model's bus traffic (acquisition/sim/model.py: Host.dma, Host._csr_transaction), in C.
 *
 * A DMA is a chain of bursts: claim the bus for the next burst as soon as it is free (claim_on: the bus's
 * next clock edge, arbitration, the transaction recorded), call back at the burst's end, wait the NIC's gap,
 * claim again; the last burst's end is the DMA's Later, which the DMA's process waits for. A register
 * access by the host bridge is a chain too: while the NIC would refuse it (STOP#: a write it retries, a
 * register still recovering from the access before, a delayed read whose data is not there yet), an attempt
 * retried, then the host bridge's wait before the next; the attempt that completes ends in the access's
 * Later. Each wait is an entry queued at the moment and with the priority the Python did it (_scheduler.c's
 * schedule, reached through its capsule), so the order of everything in the run is unchanged; only the
 * Python is gone (~16 bursts and ~27 bus claims a simulated frame).
 *
 * As in _scheduler.c, what is read and written on every burst (the bus record's free clock and lists, a
 * plan's burst fields, a new transaction's fields, the environment's time, a Later's end) are __slots__,
 * read and written at their offsets (bind() finds them); by name, getattr and setattr would cost as much as
 * the Python they replace. A transaction is made as its dataclass's __init__ makes it (every field set,
 * nothing else: PciTransaction has no __post_init__), without the Python frame.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <structmember.h> /* T_OBJECT_EX: what a __slots__ member holds */

#define SLOT(obj, at) (*(PyObject **)((char *)(obj) + (at)))

/* _scheduler.c's queue push and slot finder (its capsule, the same struct) */
static struct {
    int (*schedule)(PyObject *env, PyObject *delay, PyObject *priority, PyObject *item);
    Py_ssize_t (*slot_offset)(PyObject *cls, const char *name);
} *scheduler_api;
static PyObject *normal;                  /* simpy.events.NORMAL: the priority of every entry queued here */
/* what every burst's transaction holds: start_clk before its claim, devsel, master, parity_error_phases, kind */
static PyObject *zero, *two, *str_nic, *no_phases, *str_dma;
/* a register access's: its attempts' terminations and purposes, and the host's attribute it reads */
static PyObject *str_retry, *str_normal, *str_csr_retry, *str_csr, *str_csr_ready_ps;
static long long turnaround_clocks;       /* pci_bus.TURNAROUND_CLOCKS, given by bind() */

/* Where the slots are (bind()) */
static PyTypeObject *transaction_type;
static Py_ssize_t bus_free_clk, bus_arbitration_clocks, bus_transactions, bus_purposes, bus_wide, bus_at_or_after,
    bus_time_of;
static Py_ssize_t burst_offset, burst_phases, burst_command, burst_byte_enables, burst_target_waits,
    burst_master_waits, burst_termination, burst_busy, burst_busy_dac;
/* PciTransaction's fields, in its order */
enum { START_CLK, COMMAND, ADDRESS, DATA, BYTE_ENABLES, TARGET_WAITS, MASTER_WAITS, DEVSEL, TERMINATION, WIDE, MASTER,
       PARITY_ERROR_PHASES, KIND, TXN_FIELDS };
static Py_ssize_t txn_at[TXN_FIELDS];
static Py_ssize_t csr_template, csr_busy, csr_busy_retry; /* model.py's CsrAccess */
static Py_ssize_t engine_now, engine_active_proc, process_wake, later_env, later_then, later_queued;
static PyTypeObject *process_type, *later_type; /* scheduler.py's */
/* the classes whose slots the entry points read, checked there: the offsets are these classes' only */
static PyTypeObject *engine_type, *bus_record_type, *dma_burst_type, *csr_access_type;
static int bound;

/* 0 if obj is a cls, else -1 with a TypeError naming it (`what`). */
static int
check_type(PyObject *obj, PyTypeObject *cls, const char *what)
{
    if (PyObject_TypeCheck(obj, cls))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s must be of class %.100s, not %.100s", what, cls->tp_name,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* obj's slot at `at` (borrowed), or NULL with AttributeError set if it was never set. */
static PyObject *
slot(PyObject *obj, Py_ssize_t at, const char *name)
{
    PyObject *v = SLOT(obj, at);
    if (v == NULL)
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'", Py_TYPE(obj)->tp_name, name);
    return v;
}

/* Set obj's slot at `at` to v, stealing the reference (NULL: an error is set, nothing changes). 0 or -1. */
static int
slot_steal(PyObject *obj, Py_ssize_t at, PyObject *v)
{
    if (v == NULL)
        return -1;
    Py_XSETREF(SLOT(obj, at), v);
    return 0;
}

/* An int as a long long: 0, or -1 with an exception set. By PyLong_AsLongLongAndOverflow, which reads the
 * digits in a loop: CPython 3.11's PyLong_AsLongLong converts an int of more than one 30-bit digit (a time
 * in ps past ~1 ms) through _PyLong_AsByteArray, several times the cost, ~60 times a simulated frame. */
static int
as_ll(PyObject *v, long long *out)
{
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "an int beyond 64 bits in the model's bus arithmetic");
        return -1;
    }
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* An int slot as a long long: 0, or -1 with an exception set. */
static int
slot_ll(PyObject *obj, Py_ssize_t at, const char *name, long long *out)
{
    PyObject *v = slot(obj, at, name);
    return v == NULL ? -1 : as_ll(v, out);
}

/* _clock.c's Clock: its type, its at_or_after and time_of methods' C functions and what they compute */
static struct {
    PyTypeObject *type;
    PyCFunction at_or_after_method, time_of_method;
    int (*at_or_after)(PyObject *clock, PyObject *t_ps, long long *out);
    int (*time_of)(PyObject *clock, long long clk, long long *out);
} *clock_api;

/* The Clock whose method `method` is (at_or_after or time_of, by `function`), or NULL: what is in a bus record's
 * slot is then another callable, called as such. */
static PyObject *
bound_clock(PyObject *method, PyCFunction function)
{
    if (!PyCFunction_Check(method) || PyCFunction_GET_FUNCTION(method) != function)
        return NULL;
    PyObject *clock = PyCFunction_GET_SELF(method);
    return clock != NULL && Py_TYPE(clock) == clock_api->type ? clock : NULL;
}

/* Call a bus record's clock method (a bound method in its slot) with one int; the int it returns. A Clock's
 * own method (the usual case) is computed by _clock.c directly, with no call and no int made. */
static int
clock_call(PyObject *bus, Py_ssize_t at, const char *name, PyObject *arg, long long *out)
{
    PyObject *method = slot(bus, at, name);
    if (method == NULL)
        return -1;
    Py_INCREF(method); /* owned while it runs: it may set the slot anew */
    int failed;
    PyObject *clock = bound_clock(method, clock_api->at_or_after_method);
    if (clock != NULL) {
        failed = clock_api->at_or_after(clock, arg, out);
    } else {
        PyObject *r = PyObject_Vectorcall(method, &arg, 1, NULL);
        failed = r == NULL ? -1 : as_ll(r, out);
        Py_XDECREF(r);
    }
    Py_DECREF(method);
    return failed;
}

/* The time (ps) of clock edge `clk` of a bus record: its time_of slot called, or, a Clock's own, computed as
 * clock_call computes at_or_after. 0, or -1 with an exception set. */
static int
edge_time(PyObject *bus, long long clk, long long *out)
{
    PyObject *method = slot(bus, bus_time_of, "time_of");
    if (method == NULL)
        return -1;
    PyObject *clock = bound_clock(method, clock_api->time_of_method);
    if (clock != NULL)
        return clock_api->time_of(clock, clk, out);
    PyObject *arg = PyLong_FromLongLong(clk);
    if (arg == NULL)
        return -1;
    int failed = clock_call(bus, bus_time_of, "time_of", arg, out);
    Py_DECREF(arg);
    return failed;
}

/* A bus claim: put txn on the bus as soon as it is free, at `now` (ps), busy `busy` clocks; its master
 * arbitrates for an idle bus when it is the NIC (is_nic), the host bridge is parked on it. Records txn and
 * its purpose (and where a 64-bit one is) on the bus; *delay: how long from now until txn ends (ps, 0 if it
 * ends before). 0, or -1 with an exception set. */
static int
claim_on(PyObject *bus, PyObject *txn, PyObject *purpose, long long busy, PyObject *now, int is_nic,
         long long *delay)
{
    long long start, free;
    if (clock_call(bus, bus_at_or_after, "clock_at_or_after", now, &start) < 0
        || slot_ll(bus, bus_free_clk, "free_clk", &free) < 0)
        return -1;
    if (free <= start) {
        long long arbitration;
        if (is_nic) {
            if (slot_ll(bus, bus_arbitration_clocks, "arbitration_clocks", &arbitration) < 0)
                return -1;
            start += arbitration;
        }
    } else {
        start = free;
    }
    /* owned: the old values slot_steal drops (their __del__) and the wide flag's truth can run Python code,
     * which can set these slots anew */
    PyObject *transactions = Py_XNewRef(slot(bus, bus_transactions, "transactions")),
             *purposes = Py_XNewRef(slot(bus, bus_purposes, "purposes")),
             *wide = Py_XNewRef(slot(bus, bus_wide, "wide")),
             *txn_is_wide = Py_XNewRef(slot(txn, txn_at[WIDE], "wide"));
    int failed = transactions == NULL || purposes == NULL || wide == NULL || txn_is_wide == NULL;
    if (!failed && (!PyList_Check(transactions) || !PyList_Check(purposes) || !PyList_Check(wide))) {
        PyErr_SetString(PyExc_TypeError, "a bus record's transactions, purposes and wide must be lists");
        failed = 1;
    }
    failed = failed || slot_steal(txn, txn_at[START_CLK], PyLong_FromLongLong(start)) < 0
             || slot_steal(bus, bus_free_clk, PyLong_FromLongLong(start + busy + turnaround_clocks)) < 0;
    int is_wide = failed ? -1 : PyObject_IsTrue(txn_is_wide);
    if (is_wide > 0) {
        PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(transactions));
        failed = index == NULL || PyList_Append(wide, index) < 0;
        Py_XDECREF(index);
    }
    failed = is_wide < 0 || failed || PyList_Append(transactions, txn) < 0 || PyList_Append(purposes, purpose) < 0;
    Py_XDECREF(transactions);
    Py_XDECREF(purposes);
    Py_XDECREF(wide);
    Py_XDECREF(txn_is_wide);
    long long end, now_ps;
    if (failed || edge_time(bus, start + busy, &end) < 0 || as_ll(now, &now_ps) < 0)
        return -1;
    *delay = end > now_ps ? end - now_ps : 0;
    return 0;
}

/* One DMA's bursts (model.py's Host.dma starts them). step is the bound method queued for each wait, made
 * once (the Python made two bound methods a burst); ended says which wait it is: a burst's end (then the
 * NIC's gap) or the gap (then the next claim). */
typedef struct {
    PyObject_HEAD
    PyObject *env;     /* the scheduler.Engine */
    PyObject *bus;     /* the BusRecord */
    PyObject *plan;    /* tuple of DmaBurst */
    PyObject *data;    /* the transfer's bus words (sliced by each burst's phases), or a tuple of each burst's */
    PyObject *purpose; /* str recorded with each transaction */
    PyObject *done;    /* the Later the last burst's end succeeds */
    PyObject *gap_ps;  /* int: the NIC's turn-round between bursts */
    PyObject *wide;    /* bool: a 64-bit transfer */
    PyObject *step;    /* bound method of step() on this object; cleared once the last burst is claimed */
    long long address;
    Py_ssize_t next;   /* the next burst to claim */
    int ended;
} Bursts;

static int
bursts_traverse(Bursts *self, visitproc visit, void *arg)
{
    Py_VISIT(self->env);
    Py_VISIT(self->bus);
    Py_VISIT(self->plan);
    Py_VISIT(self->data);
    Py_VISIT(self->purpose);
    Py_VISIT(self->done);
    Py_VISIT(self->gap_ps);
    Py_VISIT(self->wide);
    Py_VISIT(self->step);
    return 0;
}

static int
bursts_clear(Bursts *self)
{
    Py_CLEAR(self->env);
    Py_CLEAR(self->bus);
    Py_CLEAR(self->plan);
    Py_CLEAR(self->data);
    Py_CLEAR(self->purpose);
    Py_CLEAR(self->done);
    Py_CLEAR(self->gap_ps);
    Py_CLEAR(self->wide);
    Py_CLEAR(self->step);
    return 0;
}

static void
bursts_dealloc(Bursts *self)
{
    PyObject_GC_UnTrack(self);
    bursts_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject BurstsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.acquisition.sim._bus.Bursts",
    .tp_doc = "One DMA's bursts on the bus, claimed one after another (bursts() makes it).",
    .tp_basicsize = sizeof(Bursts),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)bursts_traverse,
    .tp_clear = (inquiry)bursts_clear,
    .tp_dealloc = (destructor)bursts_dealloc,
};

/* A new PciTransaction of these field values (borrowed; NULL: a field never set, AttributeError), every slot
 * set as its __init__ sets them. A new reference or NULL. */
static PyObject *
new_transaction(PyObject *const values[TXN_FIELDS])
{
    for (int i = 0; i < TXN_FIELDS; i++) {
        if (values[i] == NULL) {
            PyErr_SetString(PyExc_AttributeError, "a transaction's field, or what it is made from, was never set");
            return NULL;
        }
    }
    PyObject *txn = transaction_type->tp_alloc(transaction_type, 0);
    if (txn == NULL)
        return NULL;
    for (int i = 0; i < TXN_FIELDS; i++)
        SLOT(txn, txn_at[i]) = Py_NewRef(values[i]);
    return txn;
}

/* A burst's transaction: PciTransaction(0, command, at, data, byte_enables, target_waits, master_waits, 2,
 * termination, wide, "nic", (), "dma"). A new reference or NULL. */
static PyObject *
burst_transaction(PyObject *burst, PyObject *at, PyObject *data, PyObject *wide)
{
    PyObject *const values[TXN_FIELDS] = {
        [START_CLK] = zero,
        [COMMAND] = SLOT(burst, burst_command),
        [ADDRESS] = at,
        [DATA] = data,
        [BYTE_ENABLES] = SLOT(burst, burst_byte_enables),
        [TARGET_WAITS] = SLOT(burst, burst_target_waits),
        [MASTER_WAITS] = SLOT(burst, burst_master_waits),
        [DEVSEL] = two,
        [TERMINATION] = SLOT(burst, burst_termination),
        [WIDE] = wide,
        [MASTER] = str_nic,
        [PARITY_ERROR_PHASES] = no_phases,
        [KIND] = str_dma,
    };
    return new_transaction(values);
}

/* A Later made by the process now running, as Later.__init__ makes it (scheduler.py): what its end queues is that
 * process's resumption. Made here, the ~9 a simulated frame cost no Python frame. A new reference, or NULL with
 * an exception set. */
static PyObject *
new_later(PyObject *env)
{
    PyObject *process = SLOT(env, engine_active_proc);
    if (process == NULL || Py_TYPE(process) != process_type) {
        PyErr_SetString(PyExc_RuntimeError, "a Later is made by the Process that waits for it");
        return NULL;
    }
    PyObject *wake = slot(process, process_wake, "_wake");
    if (wake == NULL)
        return NULL;
    PyObject *later = later_type->tp_alloc(later_type, 0);
    if (later == NULL)
        return NULL;
    SLOT(later, later_env) = Py_NewRef(env);
    SLOT(later, later_then) = Py_NewRef(wake);
    SLOT(later, later_queued) = Py_NewRef(Py_False);
    return later;
}

/* Queue the end of `done`, a Later, `delay` from now, as Later.succeed_in does. 0, or -1 with an exception set. */
static int
later_succeed_in(PyObject *env, PyObject *done, PyObject *delay)
{
    PyObject *then = slot(done, later_then, "_then");
    if (then == NULL || scheduler_api->schedule(env, delay, normal, then) < 0)
        return -1;
    return slot_steal(done, later_queued, Py_NewRef(Py_True));
}

/* `txn` claimed on `bus` now: the delay (ps, a new reference) until it ends, or NULL with an exception set.
 * Steals the reference to txn. */
static PyObject *
claim_now(PyObject *env, PyObject *bus, PyObject *txn, PyObject *purpose, long long busy, int is_nic)
{
    if (txn == NULL)
        return NULL;
    PyObject *now = Py_XNewRef(slot(env, engine_now, "_now")); /* owned: the bus's clock calls may set env._now */
    long long delay;
    int failed = now == NULL || claim_on(bus, txn, purpose, busy, now, is_nic, &delay) < 0;
    Py_DECREF(txn);
    Py_XDECREF(now);
    return failed ? NULL : PyLong_FromLongLong(delay);
}

/* A chain's step: a bound method of a module function on the chain object, the one entry each of its waits
 * queues. A new reference or NULL. */
static PyObject *
bound_step(PyMethodDef *def, PyObject *module, PyObject *chain)
{
    PyObject *function = PyCFunction_NewEx(def, NULL, module);
    if (function == NULL)
        return NULL;
    PyObject *method = PyMethod_New(function, chain);
    Py_DECREF(function);
    return method;
}

/* data[phases] (phases a slice), or data itself when the slice takes all of it: a burst that carries a whole
 * transfer (a descriptor's, say) shares the transfer's words instead of a view of them, one NumPy view fewer.
 * A new reference, or NULL with an exception set. */
static PyObject *
whole_or_slice(PyObject *data, PyObject *phases)
{
    Py_ssize_t start, stop, step;
    if (PySlice_Check(phases) && PySlice_Unpack(phases, &start, &stop, &step) == 0 && start == 0 && step == 1) {
        Py_ssize_t n = PyObject_Length(data);
        if (n < 0)
            return NULL;
        if (stop >= n)
            return Py_NewRef(data);
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_GetItem(data, phases);
}

/* Claim the next burst: its transaction on the bus, then the wait for its end queued (the last one's: the
 * DMA's Later, as Later.succeed_in queues it). 0, or -1 with an exception set. */
static int
claim_next(Bursts *self)
{
    Py_ssize_t k = self->next;
    if (k >= PyTuple_GET_SIZE(self->plan)) {
        PyErr_SetString(PyExc_RuntimeError, "every burst of this DMA was claimed");
        return -1;
    }
    self->next = k + 1;
    PyObject *burst = PyTuple_GET_ITEM(self->plan, k);
    long long offset, busy;
    if (slot_ll(burst, burst_offset, "offset", &offset) < 0)
        return -1;
    long long at_addr = self->address + offset;
    if (slot_ll(burst, at_addr >= (1LL << 32) ? burst_busy_dac : burst_busy, "busy", &busy) < 0)
        return -1;
    PyObject *data;
    if (PyTuple_Check(self->data)) {
        data = PyTuple_GetItem(self->data, k);
        Py_XINCREF(data);
    } else {
        PyObject *phases = slot(burst, burst_phases, "phases");
        data = phases == NULL ? NULL : whole_or_slice(self->data, phases);
    }
    if (data == NULL)
        return -1;
    PyObject *at = PyLong_FromLongLong(at_addr);
    PyObject *txn = at == NULL ? NULL : burst_transaction(burst, at, data, self->wide);
    Py_XDECREF(at);
    Py_DECREF(data);
    PyObject *delay = claim_now(self->env, self->bus, txn, self->purpose, busy, 1);
    if (delay == NULL)
        return -1;
    int r;
    if (self->next == PyTuple_GET_SIZE(self->plan)) {
        r = later_succeed_in(self->env, self->done, delay);
        Py_CLEAR(self->step); /* nothing is queued for this object any more: no cycle left through step */
    } else {
        self->ended = 1;
        r = scheduler_api->schedule(self->env, delay, normal, self->step);
    }
    Py_DECREF(delay);
    return r;
}

PyDoc_STRVAR(step_doc,
"step(bursts) -> None\n\n"
"What a DMA's queued wait does when it is due: at a burst's end, queue the NIC's gap; at the gap's end,\n"
"claim the next burst.");

static PyObject *
step(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &BurstsType)) {
        PyErr_SetString(PyExc_TypeError, "step() takes a Bursts");
        return NULL;
    }
    Bursts *self = (Bursts *)arg;
    if (self->ended) {
        self->ended = 0;
        if (self->step == NULL || scheduler_api->schedule(self->env, self->gap_ps, normal, self->step) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "a DMA stepped after its last burst");
            return NULL;
        }
    } else if (claim_next(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef step_def = {"step", (PyCFunction)step, METH_O, step_doc};

PyDoc_STRVAR(bursts_doc,
"bursts(env, bus, plan, address, data, purpose, gap_ps, wide) -> Later\n\n"
"Start a DMA: claim the first of plan's bursts (DmaBurst) on bus now, and each next one gap_ps after the\n"
"one before ends, at address + its offset. Returns the DMA's end, a Later of the running process (which\n"
"waits for it), due when the last burst ends. data: the transfer's bus words, which each burst's phases\n"
"slice, or a tuple of each burst's words.");

static PyObject *
bursts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bursts(env, bus, plan, address, data, purpose, gap_ps, wide) takes 8 "
                                         "arguments");
        return NULL;
    }
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "bursts() before bind()");
        return NULL;
    }
    if (check_type(args[0], engine_type, "bursts()'s env") < 0
        || check_type(args[1], bus_record_type, "bursts()'s bus") < 0)
        return NULL;
    if (!PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) == 0) {
        PyErr_SetString(PyExc_ValueError, "a DMA's plan is a tuple of one or more bursts");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args[2]); k++)
        if (check_type(PyTuple_GET_ITEM(args[2], k), dma_burst_type, "each burst of bursts()'s plan") < 0)
            return NULL;
    long long address;
    if (as_ll(args[3], &address) < 0)
        return NULL;
    PyObject *done = new_later(args[0]);
    if (done == NULL)
        return NULL;
    Bursts *self = PyObject_GC_New(Bursts, &BurstsType);
    if (self == NULL) {
        Py_DECREF(done);
        return NULL;
    }
    self->env = Py_NewRef(args[0]);
    self->bus = Py_NewRef(args[1]);
    self->plan = Py_NewRef(args[2]);
    self->data = Py_NewRef(args[4]);
    self->purpose = Py_NewRef(args[5]);
    self->done = Py_NewRef(done);
    self->gap_ps = Py_NewRef(args[6]);
    self->wide = Py_NewRef(args[7]);
    self->address = address;
    self->next = 0;
    self->ended = 0;
    self->step = NULL;
    PyObject_GC_Track(self);
    self->step = bound_step(&step_def, module, (PyObject *)self);
    int failed = self->step == NULL || claim_next(self) < 0;
    Py_DECREF(self);
    if (failed)
        Py_CLEAR(done);
    return done;
}

/* One register access by the host bridge (model.py's Host._csr_transaction starts it). retried says which
 * wait is due: a refused attempt's end (then the host bridge's wait) or that wait's (then the next look). */
typedef struct {
    PyObject_HEAD
    PyObject *env;      /* the scheduler.Engine */
    PyObject *bus;      /* the BusRecord */
    PyObject *host;     /* the Host: its csr_ready_ps, when the NIC accepts the next access (ps) */
    PyObject *shape;    /* the CsrAccess: the transaction's template, its busy clocks completed and retried */
    PyObject *done;     /* the Later the completed attempt's end succeeds */
    PyObject *retry_ps; /* int: the host bridge's wait between a retried attempt's end and the next */
    PyObject *step;     /* bound method of access_step() on this object; cleared once the access completes */
    long long retries;  /* the writes the NIC still refuses whatever the time */
    long long read_latency_ps, data_ready;
    int delayed_read, has_data_ready, is_nic, retried;
} Access;

static int
access_traverse(Access *self, visitproc visit, void *arg)
{
    Py_VISIT(self->env);
    Py_VISIT(self->bus);
    Py_VISIT(self->host);
    Py_VISIT(self->shape);
    Py_VISIT(self->done);
    Py_VISIT(self->retry_ps);
    Py_VISIT(self->step);
    return 0;
}

static int
access_clear(Access *self)
{
    Py_CLEAR(self->env);
    Py_CLEAR(self->bus);
    Py_CLEAR(self->host);
    Py_CLEAR(self->shape);
    Py_CLEAR(self->done);
    Py_CLEAR(self->retry_ps);
    Py_CLEAR(self->step);
    return 0;
}

static void
access_dealloc(Access *self)
{
    PyObject_GC_UnTrack(self);
    access_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject AccessType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.acquisition.sim._bus.Access",
    .tp_doc = "One register access by the host bridge, its refused attempts retried (register_access() makes it).",
    .tp_basicsize = sizeof(Access),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)access_traverse,
    .tp_clear = (inquiry)access_clear,
    .tp_dealloc = (destructor)access_dealloc,
};

/* A new transaction of a register access's template (model.py's CsrAccess: its fields, its arrays shared), ended
 * `termination` ("normal" or "retry"). */
static PyObject *
attempt(PyObject *shape, PyObject *termination)
{
    PyObject *template = slot(shape, csr_template, "template");
    if (template == NULL || check_type(template, transaction_type, "a register access's template") < 0)
        return NULL;
    PyObject *values[TXN_FIELDS];
    for (int i = 0; i < TXN_FIELDS; i++)
        values[i] = SLOT(template, txn_at[i]);
    values[TERMINATION] = termination;
    return new_transaction(values);
}

/* Where the host bridge's next attempt would start (ps): the bus's first clock edge at or after now once the
 * bus is free. 0, or -1 with an exception set. */
static int
next_attempt_at(Access *self, long long *at)
{
    PyObject *now = slot(self->env, engine_now, "_now");
    long long edge, free;
    if (now == NULL || clock_call(self->bus, bus_at_or_after, "clock_at_or_after", now, &edge) < 0
        || slot_ll(self->bus, bus_free_clk, "free_clk", &free) < 0)
        return -1;
    return edge_time(self->bus, edge > free ? edge : free, at);
}

/* Look whether the NIC accepts the access now, and put the attempt on the bus: refused (STOP#, "retry"), its
 * end queued; accepted, the access's Later queued at its end. 0, or -1 with an exception set. */
static int
access_attempt(Access *self)
{
    long long at, ready;
    PyObject *ready_ps = PyObject_GetAttr(self->host, str_csr_ready_ps);
    if (ready_ps == NULL)
        return -1;
    int failed = as_ll(ready_ps, &ready);
    Py_DECREF(ready_ps);
    if (failed || next_attempt_at(self, &at) < 0)
        return -1;
    /* a delayed read's data: fetched from when the NIC first takes the request */
    if (!self->has_data_ready && self->delayed_read && at >= ready) {
        self->data_ready = at + self->read_latency_ps;
        self->has_data_ready = 1;
    }
    int refused = self->retries || at < ready || (self->has_data_ready && at < self->data_ready);
    long long busy;
    if (slot_ll(self->shape, refused ? csr_busy_retry : csr_busy, "busy", &busy) < 0)
        return -1;
    PyObject *delay = claim_now(self->env, self->bus, attempt(self->shape, refused ? str_retry : str_normal),
                                refused ? str_csr_retry : str_csr, busy, self->is_nic);
    if (delay == NULL)
        return -1;
    int r;
    if (refused) {
        if (self->retries > 0)
            self->retries--;
        self->retried = 1;
        r = scheduler_api->schedule(self->env, delay, normal, self->step);
    } else {
        r = later_succeed_in(self->env, self->done, delay);
        Py_CLEAR(self->step); /* nothing is queued for this object any more: no cycle left through step */
    }
    Py_DECREF(delay);
    return r;
}

PyDoc_STRVAR(access_step_doc,
"access_step(access) -> None\n\n"
"What a register access's queued wait does when it is due: at a refused attempt's end, queue the host\n"
"bridge's wait; at that wait's end, attempt again.");

static PyObject *
access_step(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &AccessType)) {
        PyErr_SetString(PyExc_TypeError, "access_step() takes an Access");
        return NULL;
    }
    Access *self = (Access *)arg;
    if (self->step == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a register access stepped after it completed");
        return NULL;
    }
    if (self->retried) {
        self->retried = 0;
        if (scheduler_api->schedule(self->env, self->retry_ps, normal, self->step) < 0)
            return NULL;
    } else if (access_attempt(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef access_step_def = {"access_step", (PyCFunction)access_step, METH_O, access_step_doc};

PyDoc_STRVAR(register_access_doc,
"register_access(env, bus, host, shape, retries, delayed_read, read_latency_ps, retry_ps) -> Later\n\n"
"Start a register access by the host bridge (shape, a CsrAccess): attempt it on bus now; while the NIC\n"
"refuses it (retries writes left to refuse, host.csr_ready_ps not reached, a delayed read's data not there\n"
"read_latency_ps after the NIC first took it), attempt again retry_ps after each refused attempt ends.\n"
"Returns the access's end, a Later of the running process (which waits for it), due when the attempt that\n"
"completes ends.");

static PyObject *
register_access(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "register_access(env, bus, host, shape, retries, delayed_read, "
                                         "read_latency_ps, retry_ps) takes 8 arguments");
        return NULL;
    }
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "register_access() before bind()");
        return NULL;
    }
    long long retries, read_latency_ps;
    int delayed_read = PyObject_IsTrue(args[5]);
    if (delayed_read < 0 || as_ll(args[4], &retries) < 0 || as_ll(args[6], &read_latency_ps) < 0)
        return NULL;
    if (check_type(args[0], engine_type, "register_access()'s env") < 0
        || check_type(args[1], bus_record_type, "register_access()'s bus") < 0
        || check_type(args[3], csr_access_type, "register_access()'s shape") < 0)
        return NULL;
    PyObject *template = slot(args[3], csr_template, "template");
    if (template != NULL && check_type(template, transaction_type, "a register access's template") < 0)
        return NULL;
    PyObject *master = template == NULL ? NULL : slot(template, txn_at[MASTER], "master");
    int is_nic = master == NULL ? -1 : PyObject_RichCompareBool(master, str_nic, Py_EQ);
    if (is_nic < 0)
        return NULL;
    PyObject *done = new_later(args[0]);
    if (done == NULL)
        return NULL;
    Access *self = PyObject_GC_New(Access, &AccessType);
    if (self == NULL) {
        Py_DECREF(done);
        return NULL;
    }
    self->env = Py_NewRef(args[0]);
    self->bus = Py_NewRef(args[1]);
    self->host = Py_NewRef(args[2]);
    self->shape = Py_NewRef(args[3]);
    self->done = Py_NewRef(done);
    self->retry_ps = Py_NewRef(args[7]);
    self->retries = retries;
    self->read_latency_ps = read_latency_ps;
    self->data_ready = 0;
    self->delayed_read = delayed_read;
    self->has_data_ready = 0;
    self->is_nic = is_nic;
    self->retried = 0;
    self->step = NULL;
    PyObject_GC_Track(self);
    self->step = bound_step(&access_step_def, module, (PyObject *)self);
    int failed = self->step == NULL || access_attempt(self) < 0;
    Py_DECREF(self);
    if (failed)
        Py_CLEAR(done);
    return done;
}

PyDoc_STRVAR(bind_doc,
"bind(bus_record, dma_burst, csr_access, transaction, engine, process, later, turnaround_clocks) -> None\n\n"
"Give this module model.py's BusRecord, DmaBurst and CsrAccess, pci_bus's PciTransaction, scheduler.py's\n"
"Engine, Process and Later (where their __slots__ are), and pci_bus.TURNAROUND_CLOCKS.");

/* Each slot's offset into *at, in order; 0, or -1 with an exception set (nothing is changed then only if the
 * caller fills temporaries, as bind() does). */
static int
offsets(PyObject *cls, const char *const *names, Py_ssize_t *at)
{
    for (int i = 0; names[i] != NULL; i++)
        if ((at[i] = scheduler_api->slot_offset(cls, names[i])) < 0)
            return -1;
    return 0;
}

static PyObject *
bind(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bind(bus_record, dma_burst, csr_access, transaction, engine, process, "
                                         "later, turnaround_clocks) takes 7 classes and an int");
        return NULL;
    }
    for (int i = 0; i < 7; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "bind() takes 7 classes and an int");
            return NULL;
        }
    }
    long long turnaround;
    if (as_ll(args[7], &turnaround) < 0)
        return NULL;
    static const char *const bus_names[] = {"free_clk", "arbitration_clocks", "transactions", "purposes", "wide",
                                            "clock_at_or_after", "time_of", NULL};
    static const char *const burst_names[] = {"offset", "phases", "command", "byte_enables", "target_waits",
                                              "master_waits", "termination", "busy", "busy_dac", NULL};
    static const char *const csr_names[] = {"template", "busy", "busy_retry", NULL};
    /* in the order of the enum's fields */
    static const char *const txn_names[] = {"start_clk", "command", "address", "data", "byte_enables",
                                            "target_waits", "master_waits", "devsel", "termination", "wide",
                                            "master", "parity_error_phases", "kind", NULL};
    static const char *const engine_names[] = {"_now", "_active_proc", NULL};
    static const char *const process_names[] = {"_wake", NULL};
    static const char *const later_names[] = {"env", "_then", "_queued", NULL};
    /* all found before any is changed: a failed bind leaves the last one whole */
    Py_ssize_t b[7], d[9], c[3], t[TXN_FIELDS], e[2], p[1], l[3];
    if (offsets(args[0], bus_names, b) < 0 || offsets(args[1], burst_names, d) < 0
        || offsets(args[2], csr_names, c) < 0 || offsets(args[3], txn_names, t) < 0
        || offsets(args[4], engine_names, e) < 0 || offsets(args[5], process_names, p) < 0
        || offsets(args[6], later_names, l) < 0)
        return NULL;
    bus_free_clk = b[0], bus_arbitration_clocks = b[1], bus_transactions = b[2], bus_purposes = b[3];
    bus_wide = b[4], bus_at_or_after = b[5], bus_time_of = b[6];
    burst_offset = d[0], burst_phases = d[1], burst_command = d[2], burst_byte_enables = d[3];
    burst_target_waits = d[4], burst_master_waits = d[5], burst_termination = d[6], burst_busy = d[7];
    burst_busy_dac = d[8];
    memcpy(txn_at, t, sizeof txn_at);
    csr_template = c[0], csr_busy = c[1], csr_busy_retry = c[2];
    engine_now = e[0], engine_active_proc = e[1];
    process_wake = p[0];
    later_env = l[0], later_then = l[1], later_queued = l[2];
    turnaround_clocks = turnaround;
    Py_XSETREF(bus_record_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(dma_burst_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(csr_access_type, (PyTypeObject *)Py_NewRef(args[2]));
    Py_XSETREF(transaction_type, (PyTypeObject *)Py_NewRef(args[3]));
    Py_XSETREF(engine_type, (PyTypeObject *)Py_NewRef(args[4]));
    Py_XSETREF(process_type, (PyTypeObject *)Py_NewRef(args[5]));
    Py_XSETREF(later_type, (PyTypeObject *)Py_NewRef(args[6]));
    bound = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"register_access", (PyCFunction)(void (*)(void))register_access, METH_FASTCALL, register_access_doc},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"bursts", (PyCFunction)(void (*)(void))bursts, METH_FASTCALL, bursts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef dma_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._bus",
    .m_doc = "The rig model's bus traffic in C: a NIC's DMA bursts, the host bridge's register accesses, bus claims.",
    .m_size = -1,
    .m_methods = methods,
};

/* The C API another of the rig's extensions exports as its _C_API capsule (module: its dotted name). */
static void *
c_api_of(const char *module)
{
    /* PyCapsule_Import finds the capsule by attributes from the top package: the submodule imported first */
    PyObject *imported = PyImport_ImportModule(module);
    if (imported == NULL)
        return NULL;
    Py_DECREF(imported);
    PyObject *name = PyUnicode_FromFormat("%s._C_API", module);
    if (name == NULL)
        return NULL;
    const char *utf8 = PyUnicode_AsUTF8(name);
    void *api = utf8 == NULL ? NULL : PyCapsule_Import(utf8, 0);
    Py_DECREF(name);
    return api;
}

PyMODINIT_FUNC
PyInit__bus(void)
{
    if ((scheduler_api = c_api_of("nicrig.acquisition.sim._scheduler")) == NULL
        || (clock_api = c_api_of("nicrig.acquisition.sim._clock")) == NULL)
        return NULL;
    PyObject *events = PyImport_ImportModule("simpy.events");
    if (events == NULL)
        return NULL;
    normal = PyObject_GetAttrString(events, "NORMAL");
    Py_DECREF(events);
    if (normal == NULL || (str_nic = PyUnicode_InternFromString("nic")) == NULL
        || (str_dma = PyUnicode_InternFromString("dma")) == NULL || (two = PyLong_FromLong(2)) == NULL
        || (zero = PyLong_FromLong(0)) == NULL || (no_phases = PyTuple_New(0)) == NULL
        || (str_retry = PyUnicode_InternFromString("retry")) == NULL
        || (str_normal = PyUnicode_InternFromString("normal")) == NULL
        || (str_csr_retry = PyUnicode_InternFromString("csr_retry")) == NULL
        || (str_csr = PyUnicode_InternFromString("csr")) == NULL
        || (str_csr_ready_ps = PyUnicode_InternFromString("csr_ready_ps")) == NULL || PyType_Ready(&BurstsType) < 0
        || PyType_Ready(&AccessType) < 0)
        return NULL;
    return PyModule_Create(&dma_module);
}
