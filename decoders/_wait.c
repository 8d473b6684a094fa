/*
 * The hot loop of nicrig's in-process sigrokdecode runtime: a decoder's
 * self.wait(conditions), with the semantics of libsigrokdecode 0.5.3.
 *
 * libsigrokdecode examines one sample at a time, term by term, and wakes the
 * decoder's thread for every match (about 1.6 us each). Here the conditions
 * are compiled once per call into bit masks over the packed sample rows
 * (nicrig's sample layout is sigrok's), spans in which no watched line
 * changes are skipped with one masked compare per row, and the decoder is
 * resumed with a plain function return.
 *
 * Semantics reproduced (checked against libsigrokdecode by
 * tests/test_runtime_conformance.py with the 'waitprobe' test decoder):
 *  - the search starts AT the sample of the previous match, whose pins are
 *    then the "old" pins: edges cannot match there again, levels can;
 *  - before the first search the old pins are those of the first sample, so
 *    no edge is seen at the first sample;
 *  - a condition's terms are evaluated in dict order and stop at the first
 *    failing one; a 'skip' term counts only the samples on which the terms
 *    before it matched, and matches once it has counted its number;
 *  - wait(), wait({}) and wait([]) return the next sample (the first sample
 *    itself if no wait() has returned yet), matched == (True,);
 *  - a list of only empty dicts matches at once without moving, matched None;
 *    an empty dict among others never matches;
 *  - a term on an optional channel that is not connected: 'l' always holds,
 *    every other term never does; its pin value reads 0xff;
 *  - an unknown term letter never matches.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_WORDS 32 /* rows of up to 256 bytes (2048 channels) */

enum { M_HI, M_LO, M_RISE, M_FALL, M_EDGE, M_NOEDGE, M_KINDS };

typedef struct {
    int is_skip;
    int never;
    uint64_t skip_n, skipped;
    uint64_t *m;             /* M_KINDS masks of `words` words each: m[kind * words + w] */
} Stage;

typedef struct {
    int nstages;
    int empty;
    int never;
    Stage *stages;           /* points into Matcher.stage_pool */
} Cond;

typedef struct {
    PyObject_HEAD
    PyObject *decoder;       /* the PD instance: samplenum/matched are set on it */
    PyObject *refill;        /* () -> next block (buffer of n*unitsize bytes) or None */
    PyObject *eof;           /* exception class raised at the end of the data */
    PyObject *stuck;         /* raised when a decoder keeps waiting after the end */
    int waits_after_eof;
    int nchannels;
    int *bits;               /* decoder channel -> bit in the row, -1 unconnected */
    int unitsize, words;
    Py_buffer block;         /* current block of packed rows */
    int have_block;
    long long base, rows;    /* absolute index of the block's first row, rows in it */
    long long pos;           /* absolute sample of the last match (or the start) */
    int returned_any, started, at_eof;
    uint64_t old[MAX_WORDS];
    int ncond;
    Cond *conds;
    char *hits;              /* per condition: did it match the row last evaluated */
    /* Compiled conditions live in pools reused from one wait() to the next:
     * a decoder waits millions of times, often on long condition lists. */
    Py_ssize_t cond_cap, stage_cap, mask_cap, stages_used, masks_used;
    Stage *stage_pool;
    uint64_t *mask_pool;
    uint64_t eval_union[MAX_WORDS];
    int quick;               /* every condition needs a change on the union mask */
} Matcher;

static PyObject *s_samplenum, *s_matched;

static void free_conds(Matcher *self)
{
    self->ncond = 0;
    self->stages_used = 0;
    self->masks_used = 0;
}

/* Room for n conditions with up to `stages` stages in all. Pools only grow,
 * so pointers handed out before a wait() stay valid until the next one. */
static int reserve(Matcher *self, Py_ssize_t n, Py_ssize_t stages)
{
    if (n > self->cond_cap) {
        Cond *c = PyMem_Realloc(self->conds, n * sizeof(Cond));
        char *h = PyMem_Realloc(self->hits, n);
        if (c)
            self->conds = c;
        if (h)
            self->hits = h;
        if (!c || !h)
            return -1;
        self->cond_cap = n;
    }
    if (stages > self->stage_cap) {
        Stage *s = PyMem_Realloc(self->stage_pool, stages * sizeof(Stage));
        uint64_t *m = PyMem_Realloc(self->mask_pool, stages * M_KINDS * self->words * sizeof(uint64_t));
        if (s)
            self->stage_pool = s;
        if (m)
            self->mask_pool = m;
        if (!s || !m)
            return -1;
        self->stage_cap = stages;
    }
    memset(self->conds, 0, n * sizeof(Cond));
    return 0;
}

static Stage *new_stage(Matcher *self)
{
    Stage *s = &self->stage_pool[self->stages_used++];
    memset(s, 0, sizeof(Stage));
    s->m = &self->mask_pool[self->masks_used];
    self->masks_used += M_KINDS * self->words;
    memset(s->m, 0, M_KINDS * self->words * sizeof(uint64_t));
    return s;
}

static inline void load_row(const Matcher *self, long long abs, uint64_t *out)
{
    const uint8_t *p = (const uint8_t *)self->block.buf + (abs - self->base) * self->unitsize;
    memset(out, 0, sizeof(uint64_t) * self->words);
    memcpy(out, p, self->unitsize);
}

static int next_block(Matcher *self)
{
    /* Returns 1 with a new block, 0 at the end of the data, -1 on error. */
    long long next_base = self->base + self->rows;
    for (;;) {
        PyObject *obj = PyObject_CallNoArgs(self->refill);
        if (!obj)
            return -1;
        if (obj == Py_None) {
            Py_DECREF(obj);
            return 0;
        }
        Py_buffer view;
        int r = PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS);
        Py_DECREF(obj);
        if (r < 0)
            return -1;
        if (view.len % self->unitsize) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "block length is not a multiple of the unit size");
            return -1;
        }
        if (view.len == 0) {
            PyBuffer_Release(&view);
            continue;
        }
        if (self->have_block)
            PyBuffer_Release(&self->block);
        self->block = view;
        self->have_block = 1;
        self->base = next_base;
        self->rows = view.len / self->unitsize;
        return 1;
    }
}

static int term_kind(PyObject *value)
{
    if (!PyUnicode_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "wait(): a channel's term must be a string ('h', 'l', 'r', 'f', 'e', 'n')");
        return -2;
    }
    if (PyUnicode_GetLength(value) < 1)
        return -1;
    switch (PyUnicode_READ_CHAR(value, 0)) {
    case 'h': return M_HI;
    case 'l': return M_LO;
    case 'r': return M_RISE;
    case 'f': return M_FALL;
    case 'e': return M_EDGE;
    case 'n': return M_NOEDGE;
    }
    return -1;
}

static int compile_cond(Matcher *self, PyObject *dict, Cond *c)
{
    Py_ssize_t n = PyDict_Size(dict), pos = 0;
    PyObject *key, *value;
    c->stages = &self->stage_pool[self->stages_used];
    c->empty = n == 0;
    c->nstages = 0;
    Stage *cur = NULL;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (PyLong_Check(key)) {
            long ch = PyLong_AsLong(key);
            if (ch < 0 || ch >= self->nchannels) {
                PyErr_Format(PyExc_ValueError, "wait(): no channel %ld (the decoder has %d)", ch, self->nchannels);
                return -1;
            }
            int kind = term_kind(value);
            if (kind == -2)
                return -1;
            if (!cur || cur->is_skip) {
                cur = new_stage(self);
                c->nstages++;
            }
            int bit = self->bits[ch];
            if (kind < 0 || (bit < 0 && kind != M_LO)) {
                cur->never = 1;
                c->never = 1;
            } else if (bit >= 0) {
                cur->m[kind * self->words + (bit >> 6)] |= (uint64_t)1 << (bit & 63);
            }
        } else if (PyUnicode_Check(key)) {
            unsigned long long k = PyLong_AsUnsignedLongLong(value);
            if (PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "wait(): '%U' needs a sample count >= 0", key);
                return -1;
            }
            cur = new_stage(self);
            c->nstages++;
            cur->is_skip = 1;
            cur->skip_n = k;
            cur->skipped = 0;
        } else {
            PyErr_SetString(PyExc_TypeError, "wait(): a term's key must be a channel number or 'skip'");
            return -1;
        }
    }
    return 0;
}

/* Returns 1 when conditions are set, 0 for an automatic match, -1 on error. */
static int set_conditions(Matcher *self, PyObject *arg)
{
    free_conds(self);
    PyObject *list = NULL;
    int automatic_skip = 0;
    if (arg == NULL || arg == Py_None) {
        automatic_skip = 1;
    } else if (PyDict_Check(arg)) {
        if (PyDict_Size(arg) == 0)
            automatic_skip = 1;
        else
            list = PyList_New(1), Py_INCREF(arg), PyList_SET_ITEM(list, 0, arg);
    } else if (PyList_Check(arg)) {
        if (PyList_GET_SIZE(arg) == 0)
            automatic_skip = 1;
        else
            list = arg, Py_INCREF(arg);
    } else {
        PyErr_SetString(PyExc_TypeError, "wait(): conditions must be a dict or a list of dicts");
        return -1;
    }
    if (automatic_skip) {
        if (reserve(self, 1, 1) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        self->ncond = 1;
        self->conds[0].stages = new_stage(self);
        self->conds[0].nstages = 1;
        self->conds[0].stages[0].is_skip = 1;
        self->conds[0].stages[0].skip_n = self->returned_any ? 1 : 0;
        self->quick = 0;
        return 1;
    }
    if (!list)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(list), stages = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(list, i);
        stages += PyDict_Check(d) ? PyDict_GET_SIZE(d) : 0;
    }
    if (reserve(self, n, stages) < 0) {
        Py_DECREF(list);
        PyErr_NoMemory();
        return -1;
    }
    self->ncond = (int)n;
    int all_empty = 1;
    self->quick = 1;
    memset(self->eval_union, 0, sizeof(self->eval_union));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(list, i);
        Cond *c = &self->conds[i];
        if (!PyDict_Check(d)) {
            Py_DECREF(list);
            PyErr_SetString(PyExc_TypeError, "wait(): every condition in the list must be a dict");
            return -1;
        }
        if (compile_cond(self, d, c) < 0) {
            Py_DECREF(list);
            return -1;
        }
        if (!c->empty)
            all_empty = 0;
        if (c->empty || c->never)
            continue;
        /* A condition may be skipped over quiet rows only if it is one group of
         * pin terms with at least one edge term: then no row without a change
         * on those lines can match it, and it has no skip counter to advance. */
        Stage *s = &c->stages[0];
        const int W = self->words;
        uint64_t edges = 0;
        for (int w = 0; w < W; w++) {
            uint64_t e = s->m[M_RISE * W + w] | s->m[M_FALL * W + w] | s->m[M_EDGE * W + w];
            edges |= e;
            self->eval_union[w] |= e;
        }
        if (c->nstages != 1 || s->is_skip || !edges)
            self->quick = 0;
    }
    Py_DECREF(list);
    return all_empty ? 0 : 1;
}

static inline int stage_pins(const Stage *s, const uint64_t *old, const uint64_t *row, int W)
{
    const uint64_t *hi = s->m + M_HI * W, *lo = s->m + M_LO * W, *rise = s->m + M_RISE * W,
                   *fall = s->m + M_FALL * W, *edge = s->m + M_EDGE * W, *noedge = s->m + M_NOEDGE * W;
    for (int w = 0; w < W; w++) {
        uint64_t o = old[w], r = row[w], ch = o ^ r;
        if ((r & hi[w]) != hi[w]) return 0;
        if ((~r & lo[w]) != lo[w]) return 0;
        if ((~o & r & rise[w]) != rise[w]) return 0;
        if ((o & ~r & fall[w]) != fall[w]) return 0;
        if ((ch & edge[w]) != edge[w]) return 0;
        if (ch & noedge[w]) return 0;
    }
    return 1;
}

static inline int cond_matches(Cond *c, const uint64_t *old, const uint64_t *row, int words)
{
    if (c->empty)
        return 0;
    for (int i = 0; i < c->nstages; i++) {
        Stage *s = &c->stages[i];
        if (s->never)
            return 0;
        if (s->is_skip) {
            if (s->skipped == s->skip_n)
                continue;
            s->skipped++;
            return 0;
        }
        if (!stage_pins(s, old, row, words))
            return 0;
    }
    return 1;
}

/* Evaluate every condition on one row (all of them: skip counters advance
 * independently); store the results in hits; return whether any matched. */
static inline int eval_row(Matcher *self, const uint64_t *row, char *hits)
{
    int any = 0;
    for (int i = 0; i < self->ncond; i++) {
        hits[i] = (char)cond_matches(&self->conds[i], self->old, row, self->words);
        any |= hits[i];
    }
    memcpy(self->old, row, sizeof(uint64_t) * self->words);
    return any;
}

static PyObject *pins_tuple(Matcher *self)
{
    const uint8_t *p = (const uint8_t *)self->block.buf + (self->pos - self->base) * self->unitsize;
    PyObject *t = PyTuple_New(self->nchannels);
    if (!t)
        return NULL;
    for (int i = 0; i < self->nchannels; i++) {
        int b = self->bits[i];
        long v = b < 0 ? 0xff : (p[b >> 3] >> (b & 7)) & 1;
        PyTuple_SET_ITEM(t, i, PyLong_FromLong(v));
    }
    return t;
}

static int publish(Matcher *self, PyObject *matched)
{
    PyObject *n = PyLong_FromLongLong(self->pos);
    if (!n)
        return -1;
    int r = PyObject_SetAttr(self->decoder, s_samplenum, n);
    Py_DECREF(n);
    if (r < 0)
        return -1;
    self->returned_any = 1;
    return PyObject_SetAttr(self->decoder, s_matched, matched);
}

/* Search rows [i, end) of the current block; returns the row that matched
 * (*found set) or end. Touches no Python object. */
static long long scan(Matcher *self, long long i, long long end, uint64_t *row, char *hits, int *found)
{
    uint64_t prev[MAX_WORDS];
    const int words = self->words;
    while (i < end) {
        load_row(self, i, row);
        if ((*found = eval_row(self, row, hits)))
            return i;
        i++;
        if (!self->quick)
            continue;
        /* Rows without a change on the watched lines cannot match: compare each
         * with the one before, and evaluate only the first that differs. */
        const uint8_t *p = (const uint8_t *)self->block.buf + (i - self->base) * self->unitsize;
        memcpy(prev, self->old, sizeof(uint64_t) * words);
        for (; i < end; i++, p += self->unitsize) {
            uint64_t diff = 0;
            memset(row, 0, sizeof(uint64_t) * words);
            memcpy(row, p, self->unitsize);
            for (int w = 0; w < words; w++)
                diff |= (row[w] ^ prev[w]) & self->eval_union[w];
            if (diff)
                break;
            memcpy(prev, row, sizeof(uint64_t) * words);
        }
        memcpy(self->old, prev, sizeof(uint64_t) * words);
    }
    return end;
}

static PyObject *Matcher_wait(Matcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "wait() takes at most one argument");
        return NULL;
    }
    if (self->at_eof) {
        /* A decoder that swallows the end and waits again would spin forever
         * (it would in libsigrokdecode too): stop it after a while. */
        if (++self->waits_after_eof > 1000)
            PyErr_SetString(self->stuck, "the decoder keeps calling wait() after the end of the data");
        else
            PyErr_SetString(self->eof, "wait(): end of the data");
        return NULL;
    }
    int r = set_conditions(self, nargs ? args[0] : NULL);
    if (r < 0)
        return NULL;
    if (r == 0) {
        if (publish(self, Py_None) < 0)
            return NULL;
        return pins_tuple(self);
    }
    if (!self->started) {
        load_row(self, self->pos, self->old);
        self->started = 1;
    }
    char *hits = self->hits;
    uint64_t row[MAX_WORDS];
    long long i = self->pos;
    int found = 0;
    for (;;) {
        long long end = self->base + self->rows;
        if (i < end) {
            /* Short searches (a decoder stepping clock by clock) keep the GIL:
             * releasing it costs more than they take. */
            if (end - i > 4096) {
                Py_BEGIN_ALLOW_THREADS
                i = scan(self, i, end, row, hits, &found);
                Py_END_ALLOW_THREADS
            } else {
                i = scan(self, i, end, row, hits, &found);
            }
            if (found)
                break;
        }
        int nb = next_block(self);
        if (nb < 0)
            return NULL;
        if (nb == 0) {
            /* libsigrokdecode 0.5.3 ends a decoder by failing wait() with a
             * SystemError; self.samplenum keeps the last match. */
            self->at_eof = 1;
            PyErr_SetString(self->eof, "wait(): end of the data");
            return NULL;
        }
    }
    self->pos = i;
    PyObject *matched = PyTuple_New(self->ncond);
    if (!matched)
        return NULL;
    for (int k = 0; k < self->ncond; k++) {
        PyObject *b = hits[k] ? Py_True : Py_False;
        Py_INCREF(b);
        PyTuple_SET_ITEM(matched, k, b);
    }
    r = publish(self, matched);
    Py_DECREF(matched);
    if (r < 0)
        return NULL;
    return pins_tuple(self);
}

static int Matcher_init(Matcher *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"decoder", "bits", "unitsize", "refill", "eof", "stuck", "start", NULL};
    PyObject *decoder, *bits, *refill, *eof, *stuck;
    int unitsize;
    long long start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOiOOO|L", kwlist, &decoder, &bits, &unitsize, &refill, &eof,
                                     &stuck, &start))
        return -1;
    if (unitsize < 1 || unitsize > 8 * MAX_WORDS) {
        PyErr_Format(PyExc_ValueError, "unit size %d is not 1..%d bytes", unitsize, 8 * MAX_WORDS);
        return -1;
    }
    PyObject *seq = PySequence_Fast(bits, "bits must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->bits = PyMem_Calloc(n ? n : 1, sizeof(int));
    if (!self->bits) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long b = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (b == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (b >= 8L * unitsize || b < -1) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "channel bit %ld is outside a %d-byte row", b, unitsize);
            return -1;
        }
        self->bits[i] = (int)b;
    }
    Py_DECREF(seq);
    self->nchannels = (int)n;
    self->unitsize = unitsize;
    self->words = (unitsize + 7) / 8;
    Py_INCREF(decoder);
    self->decoder = decoder;
    Py_INCREF(refill);
    self->refill = refill;
    Py_INCREF(eof);
    self->eof = eof;
    Py_INCREF(stuck);
    self->stuck = stuck;
    self->base = start;
    self->rows = 0;
    self->pos = start;
    int nb = next_block(self);
    if (nb < 0)
        return -1;
    if (nb == 0) {
        PyErr_SetString(PyExc_ValueError, "no samples to decode");
        return -1;
    }
    return 0;
}

static void Matcher_dealloc(Matcher *self)
{
    PyMem_Free(self->conds);
    PyMem_Free(self->hits);
    PyMem_Free(self->stage_pool);
    PyMem_Free(self->mask_pool);
    if (self->have_block)
        PyBuffer_Release(&self->block);
    PyMem_Free(self->bits);
    Py_XDECREF(self->decoder);
    Py_XDECREF(self->refill);
    Py_XDECREF(self->eof);
    Py_XDECREF(self->stuck);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Matcher_get_pos(Matcher *self, void *closure)
{
    return PyLong_FromLongLong(self->pos);
}

static PyObject *Matcher_get_at_eof(Matcher *self, void *closure)
{
    return PyBool_FromLong(self->at_eof);
}

static PyMethodDef Matcher_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))Matcher_wait, METH_FASTCALL,
     "wait(conditions=None) -> pins: libsigrokdecode 0.5.3's Decoder.wait()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Matcher_getset[] = {
    {"pos", (getter)Matcher_get_pos, NULL, "absolute sample of the last match", NULL},
    {"at_eof", (getter)Matcher_get_at_eof, NULL, "whether the data has ended", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.decoders._wait.Matcher",
    .tp_basicsize = sizeof(Matcher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Matcher(decoder, bits, unitsize, refill, eof, stuck, start=0): a decoder's wait() over packed blocks",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Matcher_init,
    .tp_dealloc = (destructor)Matcher_dealloc,
    .tp_methods = Matcher_methods,
    .tp_getset = Matcher_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wait", "libsigrokdecode-compatible wait() over packed sample blocks", -1, NULL,
};

PyMODINIT_FUNC PyInit__wait(void)
{
    if (PyType_Ready(&MatcherType) < 0)
        return NULL;
    s_samplenum = PyUnicode_InternFromString("samplenum");
    s_matched = PyUnicode_InternFromString("matched");
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&MatcherType);
    if (PyModule_AddObject(m, "Matcher", (PyObject *)&MatcherType) < 0) {
        Py_DECREF(&MatcherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
