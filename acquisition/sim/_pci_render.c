/* The PCI bus renderer's two per-element loops (acquisition/sim/pci_bus.py), in C.
 *
 * gather(): the renderer turns a block's transactions (PciTransaction objects, ~20k a
 * block of the saturated stream) into flat columns. In Python that is one walk over
 * the objects per field plus one small array per transaction and field to concatenate,
 * and it cost as much CPU as all the rest of the rendering. Here one walk reads every
 * field of the usual input (Python ints and bools, str names, 1-D NumPy arrays of the
 * model's dtypes) and copies the per-phase arrays once. It checks nothing the Python
 * path reports as an error: whatever is unusual (another type or dtype, a length that
 * differs, a negative count, an unknown name) makes it answer None, and the Python
 * path, which stays the definition, then extracts the fields and raises its messages.
 *
 * phases(): every data phase's clocks, one pass over the phases.
 *
 * paint(): control lines per clock from asserted intervals, written straight into the
 * samples (NumPy's running sum over the block's ~1 Mi clocks needed a 64-bit word a clock
 * and several passes over them before packing).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "structmember.h"

/* PciTransaction's fields, in the order of its definition. */
enum { F_START, F_COMMAND, F_ADDRESS, F_DATA, F_BE, F_TW, F_MW, F_DEVSEL, F_TERM, F_WIDE, F_MASTER, F_PERR, F_KIND,
       N_FIELDS };
static const char *const field_names[N_FIELDS] = {
    "start_clk", "command", "address", "data", "byte_enables", "target_waits", "master_waits",
    "devsel", "termination", "wide", "master", "parity_error_phases", "kind",
};
static PyObject *field_str[N_FIELDS];

/* int64 columns of gather()'s first result, one row each (address holds uint64 bits); the last three
 * are sums over the transaction's phases (the truth table's bytes and wait clocks need them). */
enum { C_START, C_COMMAND, C_ADDRESS, C_DEVSEL, C_TERM, C_PHASES, C_PERR, C_BE_BITS, C_TW_SUM, C_MW_SUM,
       N_COLUMNS };
/* The width of the S16 'kind' column of the truth table. */
#define KIND_BYTES 16

/* Element types the fast path reads. Mixes of these concatenate in NumPy without any
 * change of value (uint8 with int64 gives int64; uint64 data stays uint64), so copying
 * element by element gives the values the Python path's np.concatenate(...).astype(...) does. */
enum { E_U8, E_I64, E_U64, E_OTHER };

static int
element_type(const Py_buffer *view)
{
    const char *f = view->format ? view->format : "B";
    if (f[0] == '\0' || f[1] != '\0')
        return E_OTHER; /* byte-order prefixes, structs: the Python path */
    switch (f[0]) {
    case 'B':
        return view->itemsize == 1 ? E_U8 : E_OTHER;
    case 'l':
    case 'q':
        return view->itemsize == 8 ? E_I64 : E_OTHER;
    case 'L':
    case 'Q':
        return view->itemsize == 8 ? E_U64 : E_OTHER;
    }
    return E_OTHER;
}

/* Copy a 1-D array of n elements into dst as uint64 (data: uint64 only) or as a count
 * (uint8 or non-negative int64). 1 done, 0 not for the fast path. */
static int
copy_phases(const Py_buffer *view, Py_ssize_t n, int is_data, uint64_t *dst)
{
    int type = element_type(view);
    const char *src = view->buf;
    if (view->ndim != 1 || view->shape[0] != n || (is_data ? type != E_U64 : (type != E_U8 && type != E_I64)))
        return 0;
    /* read only now: a 0-d export (a NumPy scalar as byte_enables) has no strides at all (NULL) */
    Py_ssize_t stride = view->strides[0];
    for (Py_ssize_t k = 0; k < n; k++, src += stride) {
        if (type == E_U8) {
            dst[k] = *(const uint8_t *)src;
        } else if (type == E_U64) {
            dst[k] = *(const uint64_t *)src;
        } else {
            int64_t v = *(const int64_t *)src;
            if (v < 0)
                return 0; /* the Python path says which field must not be negative */
            dst[k] = (uint64_t)v;
        }
    }
    return 1;
}

/* NumPy's buffer export costs more than everything else here per array, and a model
 * hands the same few byte-enable and wait arrays to thousands of transactions: their
 * views are kept by identity. A kept view holds a reference to its array, so no other
 * object can take its address while the walk goes on. */
#define VIEW_CACHE 256

typedef struct {
    Py_buffer view[VIEW_CACHE];
    char used[VIEW_CACHE];
} Views;

/* The view of obj, from the cache or fresh; NULL (no exception) when obj exports none. */
static const Py_buffer *
cached_view(Views *views, PyObject *obj)
{
    size_t slot = ((uintptr_t)obj >> 4) % VIEW_CACHE;
    if (views->used[slot] && views->view[slot].obj == obj)
        return &views->view[slot];
    if (views->used[slot]) {
        PyBuffer_Release(&views->view[slot]);
        views->used[slot] = 0;
    }
    if (PyObject_GetBuffer(obj, &views->view[slot], PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return NULL;
    }
    views->used[slot] = 1;
    return &views->view[slot];
}

static void
release_views(Views *views)
{
    for (int slot = 0; slot < VIEW_CACHE; slot++) {
        if (views->used[slot])
            PyBuffer_Release(&views->view[slot]);
    }
}

/* A Python int in int64; 1 done, 0 not for the fast path. */
static int
get_int64(PyObject *obj, int64_t *out)
{
    if (!PyLong_Check(obj))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* Index of the str equal to obj in names, or -1 (obj not a str, or no such name). */
static Py_ssize_t
name_index(PyObject *obj, PyObject *names)
{
    if (!PyUnicode_Check(obj))
        return -1;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(names); j++) {
        PyObject *name = PyTuple_GET_ITEM(names, j);
        if (obj == name)
            return j;
        if (PyUnicode_Check(name) && PyUnicode_Compare(obj, name) == 0)
            return j;
    }
    return -1;
}

/* Where the fields of a slots class's instances are. Getting an attribute the general
 * way (type lookup, descriptor call) costs more than the rest of a transaction's walk;
 * a field that the class keeps in a plain slot (a member descriptor, as a dataclass with
 * slots=True makes) is read straight from the instance. offset -1: getattr. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offset[N_FIELDS];
} Layout;

/* The layout of cls as it is now (the class may have been changed since the last call). */
static int
layout_of(PyObject *cls, Layout *layout)
{
    layout->type = (PyTypeObject *)cls;
    /* Only where getattr would read the slot: not past a __getattribute__ or __getattr__ of the class, and
     * only a member of cls or of a base (a member descriptor of another class set as an attribute of cls
     * gives an offset into that class's instances, which getattr refuses with a TypeError). */
    int generic = layout->type->tp_getattro == PyObject_GenericGetAttr;
    for (int j = 0; j < N_FIELDS; j++) {
        PyObject *descr = PyObject_GetAttr(cls, field_str[j]);
        if (descr == NULL)
            return -1;
        layout->offset[j] = -1;
        if (generic && Py_IS_TYPE(descr, &PyMemberDescr_Type)
            && PyType_IsSubtype(layout->type, PyDescr_TYPE(descr))) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX)
                layout->offset[j] = member->offset;
        }
        Py_DECREF(descr);
    }
    return 0;
}

/* One transaction's scalar fields into row i; its data, byte_enables, target_waits and
 * master_waits (new references, NULL for None waits) into arrays[0..4). 1 done, 0 not for
 * the fast path. */
static int
gather_scalars(PyObject *t, const Layout *layout, Py_ssize_t i, Py_ssize_t count, PyObject *terminations,
               int64_t *cols, uint8_t *flags, char *kinds, PyObject **arrays)
{
    PyObject *f[N_FIELDS] = {NULL};
    int ok = 0;
    for (int j = 0; j < N_FIELDS; j++) {
        if (Py_TYPE(t) == layout->type && layout->offset[j] >= 0) {
            f[j] = Py_XNewRef(*(PyObject **)((char *)t + layout->offset[j]));
            if (f[j] == NULL)
                goto done; /* an unset slot: the Python path's AttributeError */
        } else if ((f[j] = PyObject_GetAttr(t, field_str[j])) == NULL) {
            PyErr_Clear();
            goto done;
        }
    }
    if (!get_int64(f[F_START], &cols[C_START * count + i]) || !get_int64(f[F_COMMAND], &cols[C_COMMAND * count + i])
        || !get_int64(f[F_DEVSEL], &cols[C_DEVSEL * count + i]) || !PyLong_Check(f[F_ADDRESS]))
        goto done;
    unsigned long long address = PyLong_AsUnsignedLongLong(f[F_ADDRESS]);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or beyond 64 bits: the Python path's error */
        goto done;
    }
    cols[C_ADDRESS * count + i] = (int64_t)address;
    Py_ssize_t term = name_index(f[F_TERM], terminations);
    if (term < 0)
        goto done;
    cols[C_TERM * count + i] = term;
    if (f[F_WIDE] != Py_True && f[F_WIDE] != Py_False)
        goto done;
    flags[i] = f[F_WIDE] == Py_True;
    if (!PyUnicode_Check(f[F_MASTER]))
        goto done;
    if (PyUnicode_CompareWithASCIIString(f[F_MASTER], "nic") == 0)
        flags[count + i] = 1;
    else if (PyUnicode_CompareWithASCIIString(f[F_MASTER], "host") == 0)
        flags[count + i] = 0;
    else
        goto done;
    if (PyTuple_Check(f[F_PERR]))
        cols[C_PERR * count + i] = PyTuple_GET_SIZE(f[F_PERR]);
    else if (PyList_Check(f[F_PERR]))
        cols[C_PERR * count + i] = PyList_GET_SIZE(f[F_PERR]);
    else
        goto done;
    /* NumPy's S16 from a str: its ASCII bytes, cut at 16, NUL-padded */
    if (!PyUnicode_Check(f[F_KIND]) || !PyUnicode_IS_ASCII(f[F_KIND]))
        goto done;
    Py_ssize_t kind_len = PyUnicode_GET_LENGTH(f[F_KIND]);
    memcpy(kinds + i * KIND_BYTES, PyUnicode_DATA(f[F_KIND]), kind_len < KIND_BYTES ? kind_len : KIND_BYTES);
    Py_ssize_t n = PyObject_Length(f[F_DATA]);
    if (n < 0) {
        PyErr_Clear();
        goto done;
    }
    cols[C_PHASES * count + i] = n;
    for (int c = 0; c < 4; c++) {
        PyObject *obj = f[F_DATA + c];
        arrays[c] = c >= 2 && obj == Py_None ? NULL : Py_NewRef(obj);
    }
    ok = 1;
done:
    for (int j = 0; j < N_FIELDS; j++)
        Py_XDECREF(f[j]);
    return ok;
}

/* The per-phase columns from the arrays gather_scalars() kept, and each transaction's sums of its
 * byte enables' set bits, target waits and master waits into the rows C_BE_BITS.. of cols: 1 done,
 * 0 not for the fast path, -1 error (no memory). */
static int
gather_phases(PyObject *const *arrays, int64_t *cols, Py_ssize_t count, uint64_t *const *columns)
{
    const int64_t *phases = cols + C_PHASES * count;
    Views *views = PyMem_Calloc(1, sizeof(Views));
    if (views == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int ok = 1;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < count && ok; i++) {
        Py_ssize_t n = phases[i];
        for (int c = 0; c < 4 && ok; c++) {
            PyObject *obj = arrays[4 * i + c];
            uint64_t *dst = columns[c] + at;
            if (obj == NULL) {
                memset(dst, 0, (size_t)n * sizeof(uint64_t));
            } else if (c == 0) { /* data: a new array every transaction, not worth keeping */
                Py_buffer view;
                if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
                    PyErr_Clear();
                    ok = 0;
                } else {
                    ok = copy_phases(&view, n, 1, dst);
                    PyBuffer_Release(&view);
                }
            } else {
                const Py_buffer *view = cached_view(views, obj);
                ok = view != NULL && copy_phases(view, n, 0, dst);
            }
            if (c >= 1) {
                int64_t sum = 0;
                for (Py_ssize_t k = 0; k < n; k++)
                    sum += c == 1 ? __builtin_popcountll(dst[k]) : (int64_t)dst[k];
                cols[(C_BE_BITS + c - 1) * count + i] = sum;
            }
        }
        at += n;
    }
    release_views(views);
    PyMem_Free(views);
    return ok;
}

static PyObject *
gather(PyObject *module, PyObject *args)
{
    PyObject *seq, *terminations, *cls;
    Layout layout;
    if (!PyArg_ParseTuple(args, "O!O!O!:gather", &PyList_Type, &seq, &PyTuple_Type, &terminations, &PyType_Type,
                          &cls) || layout_of(cls, &layout) < 0)
        return NULL;
    /* a copy of the list: nothing the walk calls can change what it walks */
    PyObject *txs = PyList_GetSlice(seq, 0, PyList_GET_SIZE(seq));
    if (txs == NULL)
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(txs);
    PyObject *cols = PyByteArray_FromStringAndSize(NULL, N_COLUMNS * count * (Py_ssize_t)sizeof(int64_t));
    PyObject *flags = PyByteArray_FromStringAndSize(NULL, 2 * count);
    PyObject *kinds = PyByteArray_FromStringAndSize(NULL, KIND_BYTES * count);
    PyObject **arrays = PyMem_Calloc((size_t)(4 * count + 1), sizeof(PyObject *));
    PyObject *columns[4] = {NULL, NULL, NULL, NULL};
    PyObject *result = NULL;
    Py_ssize_t walked = 0;
    if (cols == NULL || flags == NULL || kinds == NULL || arrays == NULL) {
        if (arrays == NULL)
            PyErr_NoMemory();
        goto out;
    }
    int64_t *col = (int64_t *)PyByteArray_AS_STRING(cols);
    memset(PyByteArray_AS_STRING(kinds), 0, KIND_BYTES * count);
    int ok = 1;
    Py_ssize_t total = 0;
    for (; walked < count && ok; walked++) {
        ok = gather_scalars(PyList_GET_ITEM(txs, walked), &layout, walked, count, terminations, col,
                            (uint8_t *)PyByteArray_AS_STRING(flags), PyByteArray_AS_STRING(kinds),
                            arrays + 4 * walked);
        /* a phase count is len(data), which a class may make anything: a total whose columns' bytes would
         * pass PY_SSIZE_T_MAX (signed overflow; NumPy's SystemError "negative size") is the Python path's */
        if (ok && col[C_PHASES * count + walked] > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(uint64_t) - total)
            ok = 0;
        total += ok ? col[C_PHASES * count + walked] : 0;
    }
    if (ok) {
        uint64_t *dst[4];
        for (int c = 0; c < 4; c++) {
            columns[c] = PyByteArray_FromStringAndSize(NULL, total * (Py_ssize_t)sizeof(uint64_t));
            if (columns[c] == NULL)
                goto out;
            dst[c] = (uint64_t *)PyByteArray_AS_STRING(columns[c]);
        }
        ok = gather_phases(arrays, col, count, dst);
        if (ok < 0)
            goto out;
    }
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    result = PyTuple_Pack(7, cols, flags, kinds, columns[0], columns[1], columns[2], columns[3]);
out:
    if (arrays != NULL) {
        for (Py_ssize_t j = 0; j < 4 * walked; j++)
            Py_XDECREF(arrays[j]);
        PyMem_Free(arrays);
    }
    for (int c = 0; c < 4; c++)
        Py_XDECREF(columns[c]);
    Py_XDECREF(cols);
    Py_XDECREF(flags);
    Py_XDECREF(kinds);
    Py_DECREF(txs);
    return result;
}

/* First index j of the sorted int64 array a[0..n) with a[j] > x (right) or a[j] >= x (left):
 * NumPy's searchsorted. */
static Py_ssize_t
search(const int64_t *a, Py_ssize_t n, int64_t x, int right)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (right ? a[mid] <= x : a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Clock x's index in [c0, c0 + n), clamped to [0, n], for any int64 x and c0 (x - c0 overflowed for an
 * interval from far below c0, such as -2**63: painted nothing where it covered every clock). */
static Py_ssize_t
offset_in(int64_t x, int64_t c0, Py_ssize_t n)
{
    if (x <= c0)
        return 0;
    uint64_t d = (uint64_t)x - (uint64_t)c0; /* x - c0, exact: it lies in (0, 2**64) */
    return d < (uint64_t)n ? (Py_ssize_t)d : n;
}

/* A C-contiguous int64 1-D buffer; -1 with TypeError otherwise. */
static int
int64_buffer(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->ndim != 1 || element_type(view) != E_I64) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous 1-D int64 array", what);
        return -1;
    }
    return 0;
}

/* The words of out: a writable contiguous 1-D array of native unsigned 8-, 16-, 32- or 64-bit
 * integers (a sample of that many bytes); their size in bytes, or -1 with TypeError. */
static int
word_buffer(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (view->ndim == 1 && f[0] != '\0' && f[1] == '\0' && strchr("BHILQ", f[0]) != NULL
        && (view->itemsize == 1 || view->itemsize == 2 || view->itemsize == 4 || view->itemsize == 8))
        return (int)view->itemsize;
    PyBuffer_Release(view);
    PyErr_SetString(PyExc_TypeError, "out must be a contiguous 1-D array of native unsigned integers");
    return -1;
}

/* words[c] ^= bit for c in [lo, hi), or words[c] = bit with set: loops the compiler vectorizes */
#define WORD_LOOP(T, op)                                      \
    do {                                                      \
        T *w = words;                                         \
        for (Py_ssize_t c = lo; c < hi; c++)                  \
            w[c] op (T)bit;                                   \
    } while (0)

static void
apply(void *words, int size, Py_ssize_t lo, Py_ssize_t hi, uint64_t bit, int set)
{
    switch (size) {
    case 1:
        if (set) WORD_LOOP(uint8_t, =); else WORD_LOOP(uint8_t, ^=);
        break;
    case 2:
        if (set) WORD_LOOP(uint16_t, =); else WORD_LOOP(uint16_t, ^=);
        break;
    case 4:
        if (set) WORD_LOOP(uint32_t, =); else WORD_LOOP(uint32_t, ^=);
        break;
    default:
        if (set) WORD_LOOP(uint64_t, =); else WORD_LOOP(uint64_t, ^=);
    }
}

static PyObject *
paint(PyObject *module, PyObject *args)
{
    PyObject *out_obj, *signals;
    long long c0;
    unsigned long long idle;
    int first_bit;
    if (!PyArg_ParseTuple(args, "OLiKO!:paint", &out_obj, &c0, &first_bit, &idle, &PyList_Type, &signals))
        return NULL;
    /* A copy that owns its pairs: getting a buffer can run Python code (a class's __buffer__, Python 3.12),
     * which could empty or grow the list and free a pair still in use, or give a signal a bit beyond the word. */
    PyObject *pairs = PyList_AsTuple(signals);
    if (pairs == NULL)
        return NULL;
    Py_buffer out_view;
    int size = word_buffer(out_obj, &out_view);
    if (size < 0) {
        Py_DECREF(pairs);
        return NULL;
    }
    int bits = 8 * size;
    if (first_bit < 0 || first_bit + PyTuple_GET_SIZE(pairs) > bits || (bits < 64 && idle >> bits)) {
        PyErr_Format(PyExc_ValueError, "the signals' bits and the idle levels must fit in %d bits", bits);
        goto fail;
    }
    Py_ssize_t n = out_view.shape[0];
    /* Start from the idle levels and flip each signal's bit on its asserted clocks: the
     * intervals of one signal are disjoint, so every clock is flipped at most once a signal. */
    apply(out_view.buf, size, 0, n, idle, 1);
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(pairs); s++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, s);
        Py_buffer sv, ev;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "signals are (starts, ends) pairs");
            goto fail;
        }
        if (int64_buffer(PyTuple_GET_ITEM(pair, 0), &sv, "starts") < 0)
            goto fail;
        if (int64_buffer(PyTuple_GET_ITEM(pair, 1), &ev, "ends") < 0) {
            PyBuffer_Release(&sv);
            goto fail;
        }
        const int64_t *starts = sv.buf, *ends = ev.buf;
        Py_ssize_t m = sv.shape[0];
        if (ev.shape[0] != m) {
            PyBuffer_Release(&sv);
            PyBuffer_Release(&ev);
            PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
            goto fail;
        }
        uint64_t bit = (uint64_t)1 << (first_bit + s);
        /* the intervals that reach into [c0, c0 + n): ends > c0 and starts <= c0 + n - 1, the last clock, which
         * int64 holds (c0 + n overflowed for a c0 near 2**63, and no clock lies beyond INT64_MAX) */
        Py_ssize_t j0 = search(ends, m, c0, 1);
        Py_ssize_t j1 = n == 0 ? j0 : search(starts, m, c0 > INT64_MAX - (n - 1) ? INT64_MAX : c0 + (n - 1), 1);
        for (Py_ssize_t j = j0; j < j1; j++)
            apply(out_view.buf, size, offset_in(starts[j], c0, n), offset_in(ends[j], c0, n), bit, 0);
        PyBuffer_Release(&sv);
        PyBuffer_Release(&ev);
    }
    PyBuffer_Release(&out_view);
    Py_DECREF(pairs);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&out_view);
    Py_DECREF(pairs);
    return NULL;
}

/* phases(b0, e0, n, target_waits, master_waits, begin, iready, tready, complete, t0, i0, t_last, i_last,
 * p_last): the clocks of every data phase (pci_bus.py's module doc, "Transaction timeline"). Phase 0
 * begins at b0, asserts IRDY# at i0 = b0 + master_waits[0] and TRDY# at t0 = e0 + target_waits[0] and
 * completes at max(t0, i0); phase k >= 1 begins the clock after phase k - 1 completes, asserts IRDY# and
 * TRDY# its waits later and completes when both are asserted. One pass over the phases instead of
 * NumPy's segmented running sum and its fix-ups (a dozen passes). A transaction without phases has
 * t0 = e0, i0 = b0 and p_last = 0. */
static PyObject *
phases(PyObject *module, PyObject *args)
{
    enum { B0, E0, N, TW, MW, BEGIN, IREADY, TREADY, COMPLETE, T0, I0, T_LAST, I_LAST, P_LAST, N_ARRAYS };
    static const char *const names[N_ARRAYS] = {"b0", "e0", "n", "target_waits", "master_waits", "begin",
                                                 "iready", "tready", "complete", "t0", "i0", "t_last",
                                                 "i_last", "p_last"};
    PyObject *objs[N_ARRAYS];
    Py_buffer views[N_ARRAYS];
    int64_t *a[N_ARRAYS];
    int got = 0;
    PyObject *result = NULL;
    if (!PyArg_UnpackTuple(args, "phases", N_ARRAYS, N_ARRAYS, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                           &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &objs[12],
                           &objs[13]))
        return NULL;
    for (; got < N_ARRAYS; got++) {
        if (int64_buffer(objs[got], &views[got], names[got]) < 0)
            goto out;
        if (got >= BEGIN && views[got].readonly) {
            PyErr_Format(PyExc_TypeError, "%s must be writable", names[got]);
            got++;
            goto out;
        }
        a[got] = views[got].buf;
    }
    Py_ssize_t count = views[B0].shape[0], total = views[TW].shape[0];
    int fits = views[E0].shape[0] == count && views[N].shape[0] == count && views[MW].shape[0] == total;
    for (int j = BEGIN; j <= COMPLETE; j++)
        fits = fits && views[j].shape[0] == total;
    for (int j = T0; j <= P_LAST; j++)
        fits = fits && views[j].shape[0] == count;
    Py_ssize_t sum = 0;
    for (Py_ssize_t i = 0; i < count && fits; i++) {
        fits = a[N][i] >= 0 && a[N][i] <= total - sum;
        sum += fits ? a[N][i] : 0;
    }
    if (!fits || sum != total) {
        PyErr_SetString(PyExc_ValueError, "phases: array lengths do not match the transactions' phase counts");
        goto out;
    }
    Py_ssize_t p = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t t0 = a[E0][i], i0 = a[B0][i];
        Py_ssize_t end = p + a[N][i];
        if (p < end) {
            t0 += a[TW][p];
            i0 += a[MW][p];
            a[BEGIN][p] = a[B0][i];
            a[IREADY][p] = i0;
            a[TREADY][p] = t0;
            a[COMPLETE][p] = t0 > i0 ? t0 : i0;
            for (p++; p < end; p++) {
                int64_t begin = a[COMPLETE][p - 1] + 1, tw = a[TW][p], mw = a[MW][p];
                a[BEGIN][p] = begin;
                a[IREADY][p] = begin + mw;
                a[TREADY][p] = begin + tw;
                a[COMPLETE][p] = begin + (tw > mw ? tw : mw);
            }
            a[T_LAST][i] = a[TREADY][p - 1];
            a[I_LAST][i] = a[IREADY][p - 1];
            a[P_LAST][i] = a[COMPLETE][p - 1];
        } else {
            a[T_LAST][i] = t0;
            a[I_LAST][i] = i0;
            a[P_LAST][i] = 0;
        }
        a[T0][i] = t0;
        a[I0][i] = i0;
    }
    result = Py_NewRef(Py_None);
out:
    for (int j = 0; j < got; j++)
        PyBuffer_Release(&views[j]);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     PyDoc_STR("gather(transactions: list, terminations: tuple, cls: type) -> None | (columns, flags, kinds, "
               "data, byte_enables, target_waits, master_waits)\n\n"
               "cls: the transactions' usual class, whose slots are read directly. "
               "Every field of every transaction in one walk, as bytearrays: columns holds int64 rows start_clk, "
               "command, address (uint64 bits), devsel, termination (index in terminations), data phases, "
               "len(parity_error_phases), the sums of bits set in byte_enables, of target_waits and of "
               "master_waits; flags the bool rows wide and master == 'nic'; kinds the S16 kind; "
               "then the per-phase columns (uint64 data, int64 others; None waits as zeros). None when any "
               "transaction is outside what this reads: the caller's general path then handles them.")},
    {"phases", phases, METH_VARARGS,
     PyDoc_STR("phases(b0, e0, n, target_waits, master_waits, begin, iready, tready, complete, t0, i0, t_last, "
               "i_last, p_last) -> None\n\n"
               "Every data phase's begin, IRDY#, TRDY# and completion clocks, and per transaction t0, i0 and "
               "the last phase's TRDY#, IRDY# and completion clocks (0 without phases), into the given "
               "contiguous int64 arrays (pci_bus.py's module doc for the clocks).")},
    {"paint", paint, METH_VARARGS,
     PyDoc_STR("paint(out, c0, first_bit, idle, signals) -> None\n\n"
               "out[k] (clock c0 + k; native unsigned 8-64 bit words) = idle ^ the bits first_bit + s of every "
               "signal s asserted at that clock; signals: list of (starts, ends) contiguous int64 arrays of "
               "sorted, disjoint [start, end) clock intervals.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pci_render_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._pci_render",
    .m_doc = "The PCI bus renderer's loops over transactions and clocks (acquisition/sim/pci_bus.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__pci_render(void)
{
    for (int j = 0; j < N_FIELDS; j++) {
        if (field_str[j] == NULL && (field_str[j] = PyUnicode_InternFromString(field_names[j])) == NULL)
            return NULL;
    }
    return PyModule_Create(&pci_render_module);
}
