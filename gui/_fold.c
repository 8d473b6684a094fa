/* The overview pyramid's reduction (gui/overview.py fold): the AND and the OR (or one of them) of
 * every `width` consecutive rows of packed samples, rows of `unit` bytes. NumPy folds a group's halves together
 * one array operation at a time, a row of a few bytes per inner loop: for the 3-byte rows of a GMII
 * probe that was a third of the time a deep capture's overview took to build. Here one pass over
 * the rows gives both, without the GIL (the builder's threads fold in parallel).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Rows per block of the fast path: a block of 8 rows of unit bytes is unit 8-byte words, whose byte j
 * holds byte j % unit of a row. */
#define BLOCK_ROWS 8
/* The widest row the fast path takes (bytes): 256 channels. */
#define MAX_UNIT 32
/* What a fold keeps: the AND, the OR or both (a coarser level of the pyramid needs one of each of its
 * parts, and folding the other too would double its work). */
#define KEEP_AND 1
#define KEEP_OR 2

/* a, o (unit bytes) = the AND and the OR of the `rows` rows at src, each where `keep` asks for it. Inlined
 * with a constant unit and keep for the common rows (a bus's 2 bytes, a GMII probe's 3), the compiler
 * unrolls the loops over a row's words: with a unit known only at run time each word costs a loop step. */
static inline void
fold_group(const unsigned char *src, Py_ssize_t rows, Py_ssize_t unit, int keep, unsigned char *a,
           unsigned char *o)
{
    Py_ssize_t blocks = unit <= MAX_UNIT ? rows / BLOCK_ROWS : 0;
    if (keep & KEEP_AND)
        memset(a, 0xff, (size_t)unit);
    if (keep & KEEP_OR)
        memset(o, 0, (size_t)unit);
    if (blocks) {
        uint64_t aw[MAX_UNIT], ow[MAX_UNIT];
        for (Py_ssize_t k = 0; k < unit; k++) {
            aw[k] = ~(uint64_t)0;
            ow[k] = 0;
        }
        for (Py_ssize_t blk = 0; blk < blocks; blk++) {
            const unsigned char *words = src + blk * BLOCK_ROWS * unit;
            for (Py_ssize_t k = 0; k < unit; k++) {
                uint64_t v;
                memcpy(&v, words + 8 * k, 8);
                if (keep & KEEP_AND)
                    aw[k] &= v;
                if (keep & KEEP_OR)
                    ow[k] |= v;
            }
        }
        /* byte w * unit + b of the words is byte b of a row */
        const unsigned char *ab = (const unsigned char *)aw, *ob = (const unsigned char *)ow;
        for (Py_ssize_t w = 0; w < BLOCK_ROWS; w++)
            for (Py_ssize_t b = 0; b < unit; b++) {
                if (keep & KEEP_AND)
                    a[b] &= ab[w * unit + b];
                if (keep & KEEP_OR)
                    o[b] |= ob[w * unit + b];
            }
    }
    for (Py_ssize_t r = blocks * BLOCK_ROWS; r < rows; r++) {
        const unsigned char *row = src + r * unit;
        for (Py_ssize_t b = 0; b < unit; b++) {
            if (keep & KEEP_AND)
                a[b] &= row[b];
            if (keep & KEEP_OR)
                o[b] |= row[b];
        }
    }
}

/* and_/or_ (groups * unit bytes each, where `keep` asks for it) of the n rows of src; the last group may hold
 * fewer rows. */
static inline void
fold_rows_as(const unsigned char *src, Py_ssize_t n, Py_ssize_t unit, Py_ssize_t width, int keep,
             unsigned char *and_, unsigned char *or_)
{
    for (Py_ssize_t start = 0, g = 0; start < n; start += width, g++)
        fold_group(src + start * unit, n - start < width ? n - start : width, unit, keep, and_ + g * unit,
                   or_ + g * unit);
}

#define FOLD_KEEPING(u)                                                                                     \
    do {                                                                                                    \
        if (keep == KEEP_AND)                                                                               \
            fold_rows_as(src, n, (u), width, KEEP_AND, and_, or_);                                          \
        else if (keep == KEEP_OR)                                                                           \
            fold_rows_as(src, n, (u), width, KEEP_OR, and_, or_);                                           \
        else                                                                                                \
            fold_rows_as(src, n, (u), width, KEEP_AND | KEEP_OR, and_, or_);                                \
    } while (0)

static void
fold_rows(const unsigned char *src, Py_ssize_t n, Py_ssize_t unit, Py_ssize_t width, int keep,
          unsigned char *and_, unsigned char *or_)
{
    switch (unit) {
    case 1: FOLD_KEEPING(1); break;
    case 2: FOLD_KEEPING(2); break;
    case 3: FOLD_KEEPING(3); break;
    case 4: FOLD_KEEPING(4); break;
    default: FOLD_KEEPING(unit); break;
    }
}

PyDoc_STRVAR(fold_doc,
"fold(data, unit, width, keep=3) -> (and_, or_)\n\n"
"The AND and the OR (bytes, unit bytes a group) of every width consecutive unit-byte rows of data\n"
"(any C-contiguous bytes-like object holding whole rows); the last group may hold fewer rows.\n"
"keep: 1 the AND only, 2 the OR only (the other is then None), 3 both.");

static PyObject *
fold(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t unit, width;
    int keep = KEEP_AND | KEEP_OR;
    if (!PyArg_ParseTuple(args, "y*nn|i:fold", &view, &unit, &width, &keep))
        return NULL;
    if (unit < 1 || width < 1) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "fold: rows of %zd bytes in groups of %zd, not at least 1 each", unit, width);
        return NULL;
    }
    if (keep < KEEP_AND || keep > (KEEP_AND | KEEP_OR)) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "fold: keep is 1 (AND), 2 (OR) or 3 (both), not %d", keep);
        return NULL;
    }
    if (view.len % unit) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "fold: %zd bytes are no whole number of %zd-byte rows", view.len, unit);
        return NULL;
    }
    Py_ssize_t n = view.len / unit;
    Py_ssize_t groups = n / width + (n % width != 0);
    PyObject *and_ = keep & KEEP_AND ? PyBytes_FromStringAndSize(NULL, groups * unit) : Py_NewRef(Py_None);
    PyObject *or_ = keep & KEEP_OR ? PyBytes_FromStringAndSize(NULL, groups * unit) : Py_NewRef(Py_None);
    if (and_ == NULL || or_ == NULL) {
        Py_XDECREF(and_);
        Py_XDECREF(or_);
        PyBuffer_Release(&view);
        return NULL;
    }
    /* A part not kept is never written: its pointer is the other's, so that it stays within an object. */
    unsigned char *a = (unsigned char *)PyBytes_AS_STRING(keep & KEEP_AND ? and_ : or_);
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(keep & KEEP_OR ? or_ : and_);
    /* The view holds data's export; the outputs are no one else's yet. */
    Py_BEGIN_ALLOW_THREADS
    fold_rows(view.buf, n, unit, width, keep, a, o);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = PyTuple_Pack(2, and_, or_);
    Py_DECREF(and_);
    Py_DECREF(or_);
    return out;
}

/* The runs of each of k channels over n columns: a column's state is the channel's level where its AND and OR
 * agree, 2 (changing) where they differ; equal states of consecutive columns are one run. Written channel after
 * channel: start and end time (ps; a run ends where the next column starts, the last at end_ps) and state;
 * counts[c] is channel c's number of runs. Returns the total. */
static Py_ssize_t
channel_runs(const unsigned char *and_, const unsigned char *or_, Py_ssize_t unit, const int64_t *t_ps,
             Py_ssize_t n, int64_t end_ps, const int64_t *bits, Py_ssize_t k, int64_t *start, int64_t *end,
             int8_t *state, int64_t *counts)
{
    Py_ssize_t out = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_ssize_t byte = (Py_ssize_t)(bits[c] >> 3), first = out;
        int shift = (int)(bits[c] & 7);
        int8_t last = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int lo = (and_[i * unit + byte] >> shift) & 1, hi = (or_[i * unit + byte] >> shift) & 1;
            int8_t s = (int8_t)(lo == hi ? lo : 2);
            if (s != last) {
                if (out > first)
                    end[out - 1] = t_ps[i];
                start[out] = t_ps[i];
                state[out] = s;
                out++;
                last = s;
            }
        }
        if (out > first)
            end[out - 1] = end_ps;
        counts[c] = out - first;
    }
    return out;
}

PyDoc_STRVAR(runs_doc,
"runs(and_, or_, unit, t_ps, end_ps, bits, start, end, state, counts) -> total\n\n"
"The runs of equal states (0, 1, 2 changing) of channels bits (int64) over columns of packed AND and OR rows\n"
"(unit bytes each) starting at t_ps (int64 ps), the last ending at end_ps: written channel after channel into\n"
"start, end (int64 ps) and state (int8), each with room for len(t_ps) * len(bits) runs, and each channel's\n"
"number of runs into counts (int64, len(bits)). Returns the number of runs written.");

static PyObject *
runs(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer a, o, t, b, s, e, st, cn;
    Py_ssize_t unit;
    long long end_ps;
    if (!PyArg_ParseTuple(args, "y*y*ny*Ly*w*w*w*w*:runs", &a, &o, &unit, &t, &end_ps, &b, &s, &e, &st, &cn))
        return NULL;
    Py_ssize_t n = t.len / 8, k = b.len / 8;
    Py_ssize_t total = -1;
    int bad_bit = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        int64_t bit = ((const int64_t *)b.buf)[c];
        if (bit < 0 || bit >= 8 * unit)
            bad_bit = 1;
    }
    if (unit < 1 || a.len != n * unit || o.len != n * unit || bad_bit)
        PyErr_SetString(PyExc_ValueError, "runs: AND and OR need len(t_ps) rows of unit bytes, bits within a row");
    else if (s.len < n * k * 8 || e.len < n * k * 8 || st.len < n * k || cn.len < k * 8)
        PyErr_SetString(PyExc_ValueError, "runs: the outputs need room for len(t_ps) * len(bits) runs");
    else
        total = channel_runs(a.buf, o.buf, unit, t.buf, n, (int64_t)end_ps, b.buf, k, s.buf, e.buf, st.buf, cn.buf);
    Py_buffer *views[] = {&a, &o, &t, &b, &s, &e, &st, &cn};
    for (size_t v = 0; v < sizeof views / sizeof *views; v++)
        PyBuffer_Release(views[v]);
    return total < 0 ? NULL : PyLong_FromSsize_t(total);
}

static PyMethodDef fold_methods[] = {
    {"fold", fold, METH_VARARGS, fold_doc},
    {"runs", runs, METH_VARARGS, runs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fold_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.gui._fold",
    .m_doc = "The overview pyramid's AND and OR of groups of packed sample rows, and a view's runs of levels.",
    .m_size = -1,
    .m_methods = fold_methods,
};

PyMODINIT_FUNC
PyInit__fold(void)
{
    return PyModule_Create(&fold_module);
}
