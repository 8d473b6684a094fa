/*
 * Kernel trace events from the ftrace ring buffer's raw sub-buffers, read with
 * libtraceevent (the library trace-cmd and perf use), into flat columns.
 *
 * The raw pages come from tracefs' per_cpu/cpuN/trace_pipe_raw; their layout
 * (header_page) and every event's record layout (events/SYS/NAME/format) are
 * parsed by libtraceevent, which also walks a sub-buffer's records (kbuffer:
 * time deltas, time extends, padding, missed-event markers). Nothing here
 * knows a byte offset of its own: fields are found by name in the formats.
 *
 * Parser(header_page, formats, columns, string_fields, page_size)
 *   page_size:     bytes of one sub-buffer as the trace was recorded (a power of
 *                  two; the recorder stores it with the trace)
 *   formats:       [(system, format text), ...]
 *   columns:       [[field name, alternative, ...], ...] -> one int64 column each
 *                  (-1 where the event has none of the names)
 *   string_fields: [field name, ...] -> one string column, as indices into
 *                  the list the parser keeps (-1 where absent)
 * Parser.parse(data) walks sub-buffers of page_size bytes and returns
 *   (ts int64, id int32, pid int32, cols int64 [n x ncols], strings int32,
 *    missed events, sub-buffers read, sub-buffers unreadable, records of
 *    unknown events). An unreadable sub-buffer (kbuffer refuses it, or its
 *    commit size runs past its end) is skipped and counted, never read.
 * Parser.events() lists (id, system, name); Parser.symbols(id, field) gives
 * the __print_symbolic table of a field ({value: name}, e.g. drop reasons).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event-parse.h>
#include <kbuffer.h>

#define MAX_COLS 32

typedef struct {
    struct tep_event *event;
    struct tep_format_field *col[MAX_COLS];
    const char *str_field; /* name of the string field this event has, or NULL */
} EventCols;

typedef struct {
    PyObject_HEAD
    struct tep_handle *tep;
    int ncols;
    EventCols *by_id; /* indexed by event id */
    int max_id;
    Py_ssize_t page_size;
    PyObject *strings;  /* list of str */
    PyObject *str_index; /* dict str -> int */
} Parser;

/* Growable output buffer. */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_put(Buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static void Parser_dealloc(Parser *self)
{
    if (self->tep)
        tep_free(self->tep);
    free(self->by_id);
    Py_XDECREF(self->strings);
    Py_XDECREF(self->str_index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The event's first field named in `names`; `numeric`: only plain numbers (not arrays such as the syscall
 * arguments, nor strings). Sets *err on a Python error. */
static struct tep_format_field *find_any(struct tep_event *ev, PyObject *names, int numeric, int *err)
{
    Py_ssize_t n = PySequence_Size(names);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PySequence_GetItem(names, k);
        const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
        if (!s) {
            Py_XDECREF(name);
            *err = 1;
            return NULL;
        }
        struct tep_format_field *f = tep_find_field(ev, s);
        Py_DECREF(name);
        if (f && (!numeric || !(f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_STRING | TEP_FIELD_IS_DYNAMIC))))
            return f;
    }
    return NULL;
}

static int Parser_init(Parser *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"header_page", "formats", "columns", "string_fields", "page_size", NULL};
    Py_buffer header;
    PyObject *formats, *columns, *string_fields;
    Py_ssize_t page_size;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*OOOn", kwlist, &header, &formats, &columns, &string_fields,
                                     &page_size))
        return -1;
    int rc = -1;
    /* the ring buffer's sub-buffers are whole pages, or power-of-two multiples of a page (buffer_subbuf_size_kb) */
    if (page_size < 64 || page_size > (1 << 30) || (page_size & (page_size - 1))) {
        PyErr_Format(PyExc_ValueError, "sub-buffer size of %zd bytes: not a power of two from 64 bytes to 1 GiB",
                     page_size);
        goto out;
    }
    self->page_size = page_size;
    self->tep = tep_alloc();
    if (!self->tep) {
        PyErr_NoMemory();
        goto out;
    }
    tep_set_long_size(self->tep, sizeof(long));
    tep_set_page_size(self->tep, (int)page_size);
    if (tep_parse_header_page(self->tep, header.buf, header.len, sizeof(long)) != 0) {
        PyErr_SetString(PyExc_ValueError, "libtraceevent could not parse header_page");
        goto out;
    }
    PyObject *fseq = PySequence_Fast(formats, "formats must be a sequence of (system, format)");
    if (!fseq)
        goto out;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fseq); i++) {
        const char *sys;
        const char *text;
        Py_ssize_t tlen;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fseq, i), "sy#", &sys, &text, &tlen)) {
            Py_DECREF(fseq);
            goto out;
        }
        enum tep_errno err = tep_parse_event(self->tep, text, tlen, sys);
        if (err != 0) {
            char msg[256];
            tep_strerror(self->tep, err, msg, sizeof(msg));
            PyErr_Format(PyExc_ValueError, "libtraceevent could not parse a format of %s: %s", sys, msg);
            Py_DECREF(fseq);
            goto out;
        }
    }
    Py_DECREF(fseq);

    PyObject *cseq = PySequence_Fast(columns, "columns must be a sequence of name lists");
    if (!cseq)
        goto out;
    self->ncols = (int)PySequence_Fast_GET_SIZE(cseq);
    if (self->ncols > MAX_COLS) {
        PyErr_SetString(PyExc_ValueError, "too many columns");
        Py_DECREF(cseq);
        goto out;
    }
    int nevents = tep_get_events_count(self->tep);
    self->max_id = 0;
    for (int e = 0; e < nevents; e++) {
        struct tep_event *ev = tep_get_event(self->tep, e);
        if (ev && ev->id > self->max_id)
            self->max_id = ev->id;
    }
    self->by_id = calloc(self->max_id + 1, sizeof(EventCols));
    if (!self->by_id) {
        PyErr_NoMemory();
        Py_DECREF(cseq);
        goto out;
    }
    for (int e = 0; e < nevents; e++) {
        struct tep_event *ev = tep_get_event(self->tep, e);
        if (!ev)
            continue;
        EventCols *ec = &self->by_id[ev->id];
        ec->event = ev;
        int err = 0;
        for (int c = 0; c < self->ncols && !err; c++)
            ec->col[c] = find_any(ev, PySequence_Fast_GET_ITEM(cseq, c), 1, &err);
        struct tep_format_field *sf = err ? NULL : find_any(ev, string_fields, 0, &err);
        if (err) {
            Py_DECREF(cseq);
            goto out;
        }
        ec->str_field = sf ? sf->name : NULL; /* owned by the event, lives as long as tep */
    }
    Py_DECREF(cseq);
    self->strings = PyList_New(0);
    self->str_index = PyDict_New();
    if (!self->strings || !self->str_index)
        goto out;
    rc = 0;
out:
    PyBuffer_Release(&header);
    return rc;
}

static int64_t field_value(struct tep_format_field *f, void *data)
{
    unsigned long long v = 0;
    if (tep_read_number_field(f, data, &v) != 0)
        return -1;
    if ((f->flags & TEP_FIELD_IS_SIGNED) && f->size < 8) {
        int shift = 64 - 8 * f->size;
        return ((int64_t)(v << shift)) >> shift;
    }
    return (int64_t)v;
}

/* Index of a string in the parser's list, adding it on first sight; -1 on error. */
static int32_t intern(Parser *self, const char *s, int len)
{
    while (len > 0 && s[len - 1] == '\0')
        len--;
    PyObject *key = PyUnicode_DecodeUTF8(s, len, "replace");
    if (!key)
        return -1;
    PyObject *idx = PyDict_GetItemWithError(self->str_index, key);
    if (idx) {
        Py_DECREF(key);
        return (int32_t)PyLong_AsLong(idx);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(self->strings);
    PyObject *num = PyLong_FromSsize_t(n);
    if (!num || PyList_Append(self->strings, key) < 0 || PyDict_SetItem(self->str_index, key, num) < 0) {
        Py_XDECREF(num);
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(num);
    Py_DECREF(key);
    return (int32_t)n;
}

static PyObject *Parser_parse(Parser *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t subbuf = self->page_size;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    if (data.len % subbuf != 0) {
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "data of %zd bytes is not whole sub-buffers of %zd bytes",
                            data.len, subbuf);
    }
    struct kbuffer *kbuf = tep_kbuffer(self->tep);
    if (!kbuf) {
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    Buf ts = {0}, id = {0}, pid = {0}, cols = {0}, str = {0};
    long long missed = 0, pages = 0, unreadable = 0, unknown = 0;
    int failed = 0;
    /* kbuffer keeps a pointer into the page, and tep_get_field_raw wants writable memory */
    char *page = malloc(subbuf);
    if (!page) {
        failed = 1;
        PyErr_NoMemory();
    }
    for (Py_ssize_t off = 0; !failed && off < data.len; off += subbuf) {
        memcpy(page, (char *)data.buf + off, subbuf);
        /* a page kbuffer refuses, or whose commit size runs past its end, held records nobody can read: they
         * are lost, and counted so, rather than walked beyond the page */
        if (kbuffer_load_subbuffer(kbuf, page) < 0 ||
            kbuffer_subbuffer_size(kbuf) > subbuf - kbuffer_start_of_data(kbuf)) {
            unreadable++;
            continue;
        }
        pages++;
        int m = kbuffer_missed_events(kbuf);
        if (m > 0)
            missed += m;
        else if (m < 0) /* events were lost but the kernel could not say how many */
            missed += 1;
        unsigned long long t;
        for (void *rec = kbuffer_read_event(kbuf, &t); rec; rec = kbuffer_next_event(kbuf, &t)) {
            struct tep_record r = {0};
            r.ts = t;
            r.data = rec;
            r.size = kbuffer_event_size(kbuf);
            int type = tep_data_type(self->tep, &r);
            if (type < 0 || type > self->max_id || !self->by_id[type].event) {
                unknown++;
                continue;
            }
            EventCols *ec = &self->by_id[type];
            int64_t t64 = (int64_t)t;
            int32_t id32 = type, pid32 = tep_data_pid(self->tep, &r), s32 = -1;
            int64_t row[MAX_COLS];
            for (int c = 0; c < self->ncols; c++)
                row[c] = ec->col[c] ? field_value(ec->col[c], rec) : -1;
            if (ec->str_field) {
                int len = 0;
                char *s = tep_get_field_raw(NULL, ec->event, ec->str_field, &r, &len, 0);
                if (s && len > 0) {
                    s32 = intern(self, s, strnlen(s, len) < (size_t)len ? (int)strnlen(s, len) : len);
                    if (s32 < 0) {
                        failed = 1;
                        break;
                    }
                }
            }
            if (buf_put(&ts, &t64, 8) || buf_put(&id, &id32, 4) || buf_put(&pid, &pid32, 4) ||
                buf_put(&cols, row, 8 * self->ncols) || buf_put(&str, &s32, 4)) {
                failed = 1;
                PyErr_NoMemory();
                break;
            }
        }
    }
    free(page);
    kbuffer_free(kbuf);
    PyBuffer_Release(&data);
    PyObject *out = NULL;
    if (!failed)
        out = Py_BuildValue("(y#y#y#y#y#LLLL)", ts.p ? ts.p : "", (Py_ssize_t)ts.len, id.p ? id.p : "",
                            (Py_ssize_t)id.len, pid.p ? pid.p : "", (Py_ssize_t)pid.len, cols.p ? cols.p : "",
                            (Py_ssize_t)cols.len, str.p ? str.p : "", (Py_ssize_t)str.len, missed, pages, unreadable,
                            unknown);
    free(ts.p);
    free(id.p);
    free(pid.p);
    free(cols.p);
    free(str.p);
    return out;
}

static PyObject *Parser_events(Parser *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (int e = 0; e <= self->max_id; e++) {
        struct tep_event *ev = self->by_id[e].event;
        if (!ev)
            continue;
        PyObject *item = Py_BuildValue("(iss)", ev->id, ev->system, ev->name);
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

/* The first __print_symbolic() over field `name` in an argument tree. */
static struct tep_print_arg *find_symbolic(struct tep_print_arg *arg, const char *name)
{
    for (; arg; arg = arg->next) {
        if (arg->type == TEP_PRINT_SYMBOL && arg->symbol.field && arg->symbol.field->type == TEP_PRINT_FIELD &&
            arg->symbol.field->field.name && strcmp(arg->symbol.field->field.name, name) == 0)
            return arg;
        if (arg->type == TEP_PRINT_OP) {
            struct tep_print_arg *hit = find_symbolic(arg->op.left, name);
            if (!hit)
                hit = find_symbolic(arg->op.right, name);
            if (hit)
                return hit;
        }
    }
    return NULL;
}

static PyObject *Parser_symbols(Parser *self, PyObject *args)
{
    int id;
    const char *name;
    if (!PyArg_ParseTuple(args, "is", &id, &name))
        return NULL;
    if (id < 0 || id > self->max_id || !self->by_id[id].event)
        return PyErr_Format(PyExc_KeyError, "no event with id %d", id);
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    struct tep_print_arg *sym = find_symbolic(self->by_id[id].event->print_fmt.args, name);
    for (struct tep_print_flag_sym *s = sym ? sym->symbol.symbols : NULL; s; s = s->next) {
        char *end;
        long long v = strtoll(s->value, &end, 0);
        if (*end != '\0')
            continue; /* an expression libtraceevent kept as text: not a value we can match */
        PyObject *k = PyLong_FromLongLong(v), *val = PyUnicode_FromString(s->str);
        if (!k || !val || PyDict_SetItem(out, k, val) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(val);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(val);
    }
    return out;
}

static PyObject *Parser_strings(Parser *self, void *closure)
{
    return PyList_GetSlice(self->strings, 0, PyList_GET_SIZE(self->strings));
}

static PyMethodDef Parser_methods[] = {
    {"parse", (PyCFunction)Parser_parse, METH_VARARGS,
     "parse(data) -> (ts, id, pid, cols, strings, missed, subbuffers, unreadable subbuffers, unknown records)"},
    {"events", (PyCFunction)Parser_events, METH_NOARGS, "events() -> [(id, system, name)]"},
    {"symbols", (PyCFunction)Parser_symbols, METH_VARARGS,
     "symbols(id, field) -> {value: name} from the event's __print_symbolic over field"},
    {NULL}};

static PyGetSetDef Parser_getset[] = {
    {"strings", (getter)Parser_strings, NULL, "the string column's values, by index", NULL},
    {NULL}};

static PyTypeObject ParserType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nicrig.acquisition.hostprobe._traceevent.Parser",
    .tp_basicsize = sizeof(Parser),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "libtraceevent parser of ftrace raw sub-buffers into columns",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Parser_init,
    .tp_dealloc = (destructor)Parser_dealloc,
    .tp_methods = Parser_methods,
    .tp_getset = Parser_getset,
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_traceevent",
                                       "libtraceevent reader of ftrace raw sub-buffers", -1, NULL};

PyMODINIT_FUNC PyInit__traceevent(void)
{
    if (PyType_Ready(&ParserType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&ParserType);
    if (PyModule_AddObject(m, "Parser", (PyObject *)&ParserType) < 0) {
        Py_DECREF(&ParserType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
