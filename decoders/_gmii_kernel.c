/*
 * The native kernel of the gmii,ethernet decoder stack: packed sample rows in,
 * the rows of the ethernet table out, written straight into the table's layout
 * (_table_rows.h) as decoders/tables.py makes them from the ethernet decoder's
 * records (decoders/gmii/pd.py and decoders/ethernet/pd.py are the reference;
 * tests/test_kernel_link.py holds this file byte-identical to them).
 *
 * What the records depend on, and so all this kernel computes:
 *  - clocks: in state mode every row (the PD steps row by row while EN or ER
 *    is high and skips rows with both low, on which its clock() does
 *    nothing); in timing mode every rising edge of CLK after the first row
 *    (libsigrokdecode's wait() never sees an edge on the first sample, and
 *    the PD's idle wait only skips edges on which its clock() does nothing);
 *  - bursts (EN high): the octets before the SFD decide whether the burst is
 *    a frame (0x55 preamble, junk, or for the first burst of a capture that
 *    began with EN high, anything else than preamble or SFD skips the burst);
 *    the octets after it are the frame, ended by the first clock with EN low.
 *    A frame the capture cuts off is no record (ethernet drops truncated
 *    frames), nor is one without octets after the SFD;
 *  - per frame: its length, the CRC-32 over all of it (802.3 clause 3.2.9,
 *    the FCS is good when the residue is 0xC704DD7B), how many of its octets
 *    had ER high, and its first HEAD_OCTETS octets, which hold every field
 *    the ethernet decoder reads (8 VLAN tags, a 60-octet IPv4 header, UDP,
 *    the 16-octet nicrig header: at most 130 octets);
 *  - across frames: the ethernet decoder's table of fragmented datagrams
 *    (insertion-ordered, at most 256, oldest dropped first) that gives later
 *    IPv4 fragments the nicrig kind and sequence number of the first one.
 *
 * Memory is bounded by that state whatever the bursts and the data: rows are
 * the only thing that grows, until take() hands them over.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_table_rows.h"

#define HEAD_OCTETS 160
#define MAX_TAGS 8
#define MAX_DATAGRAMS 256
#define PREAMBLE_OCTET 0x55
#define SFD_OCTET 0xD5
#define CRC_RESIDUE 0x2144DF1Cu /* zlib.crc32 of a frame with a good FCS */
#define NICRIG_MAGIC 0x4E524731u
#define PAUSE_QUANTUM_BITS 512

enum { PH_PRE, PH_DATA, PH_SKIP };

/* The ethernet decoder's record keys that are table columns (pfc: its PFC times, joined by commas). */
enum {
    K_SS, K_ES, K_DIRECTION, K_LENGTH, K_DST, K_SRC, K_VLAN, K_ETHERTYPE, K_INNER_ETHERTYPE, K_FCS_OK,
    K_ERROR_OCTETS, K_PAUSE_QUANTA, K_PAUSE_NS, K_PFC, K_IP_SRC, K_IP_DST, K_IP_PROTO, K_FRAG_OFFSET,
    K_UDP_SPORT, K_UDP_DPORT, K_NICRIG_KIND, K_SEQ, K_COUNT
};
static const ColumnSpec COLUMNS[K_COUNT] = {
    {"ss", "<i8"}, {"es", "<i8"}, {"direction", "|S"}, {"length", "<i4"}, {"dst", "|S"}, {"src", "|S"},
    {"vlan", "<i4"}, {"ethertype", "<i4"}, {"inner_ethertype", "<i4"}, {"fcs_ok", "|b1"}, {"error_octets", "<i4"},
    {"pause_quanta", "<i4"}, {"pause_ns", "<f8"}, {"pfc_quanta", "|S"}, {"ip_src", "|S"}, {"ip_dst", "|S"},
    {"ip_proto", "<i2"}, {"frag_offset", "<i4"}, {"udp_sport", "<i4"}, {"udp_dport", "<i4"},
    {"nicrig_kind", "<i2"}, {"seq", "<i8"},
};
#define MAX_DIRECTION 64  /* bytes kept of the direction option (the column is narrower) */
static uint32_t crc_table[256];

typedef struct {
    uint32_t src, dst;
    uint16_t ident, kind;
    uint8_t proto;
    uint32_t seq;
} Datagram;

typedef struct {
    PyObject_HEAD
    /* configuration */
    int unitsize, state_mode, has_er, has_clk;
    int en_byte, er_byte, clk_byte, d_byte[8];
    uint8_t en_mask, er_mask, clk_mask, d_shift[8];
    int d_run;               /* the data bits are 8 consecutive row bits from d_byte[0] */
    PyObject *direction;     /* str: the gmii decoder's option, carried to every record */
    char direction_utf8[MAX_DIRECTION];
    Py_ssize_t direction_len;
    int direction_valid;     /* 'tx' or 'rx': anything else fails the PD at its second burst */
    double link_rate;
    PyObject *failed;        /* exception class for a PD failure */
    Rows rows;               /* the table rows made so far */
    Column col[K_COUNT];
    PyThreadState *released; /* set while feed() runs without the GIL */
    int busy;                /* in feed(): another thread must not feed or finish meanwhile */
    int no_memory;           /* feed() stopped for want of memory */
    /* where we are */
    long long next;          /* absolute sample of the next row fed */
    int started, clk_old;
    int en_at_start;
    long long bursts;
    int in_burst, had_burst_end;
    int have_cur, cur_er;
    uint8_t cur_d;
    int phase, capture_start;
    long long burst_ss;
    /* the frame being received */
    long long n, nerr;
    uint32_t crc;
    uint8_t head[HEAD_OCTETS];
    /* ethernet's fragmented datagrams, oldest first */
    int ndatagrams;
    Datagram datagrams[MAX_DATAGRAMS];
} Kernel;

static void make_crc_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc_table[i] = c;
    }
}

/* Long blocks are scanned without the GIL (other threads, the GUI's, run
 * meanwhile); it is taken back for an error, and for a PAUSE time Python rounds. */
static inline void gil_take(Kernel *k)
{
    if (k->released)
        PyEval_RestoreThread(k->released);
}

static inline void gil_give(Kernel *k)
{
    if (k->released)
        k->released = PyEval_SaveThread();
}

/* -- the gmii decoder, clock by clock ------------------------------------------------------------------ */

static inline void octet(Kernel *k, uint8_t v, int er)
{
    if (k->phase == PH_DATA) {
        if (k->n < HEAD_OCTETS)
            k->head[k->n] = v;
        k->crc = crc_table[(k->crc ^ v) & 0xFF] ^ (k->crc >> 8);
        k->n++;
        k->nerr += er;
    } else if (k->phase == PH_PRE) {
        if (v == SFD_OCTET)
            k->phase = PH_DATA;
        else if (v != PREAMBLE_OCTET && k->capture_start)
            k->phase = PH_SKIP; /* the frame began before the capture */
    }
}

static int burst_start(Kernel *k, long long sn)
{
    if (k->had_burst_end && !k->direction_valid) {
        /* The PD looks up its minimum gap by direction once a burst follows another. */
        gil_take(k);
        PyObject *r = PyObject_Repr(k->direction);
        if (r) {
            PyErr_Format(k->failed, "gmii-1 raised at sample %lld: KeyError: %U (option direction is "
                         "neither tx nor rx)", sn, r);
            Py_DECREF(r);
        }
        gil_give(k);
        return -1;
    }
    k->in_burst = 1;
    k->burst_ss = sn;
    k->phase = PH_PRE;
    k->capture_start = k->bursts == 0 && k->en_at_start;
    k->bursts++;
    k->n = k->nerr = 0;
    k->crc = 0xFFFFFFFFu;
    return 0;
}

static int frame_record(Kernel *k, long long es);

static inline int burst_end(Kernel *k, long long es)
{
    k->in_burst = 0;
    k->had_burst_end = 1;
    if (k->phase == PH_DATA && k->n > 0)
        return frame_record(k, es);
    return 0;
}

/* One clock: EN, ER and the data octet sampled at sample sn. */
static inline int gmii_clock(Kernel *k, long long sn, int en, int er, uint8_t d)
{
    if (en) {
        if (!k->in_burst) {
            if (burst_start(k, sn) < 0)
                return -1;
        } else if (k->have_cur) {
            octet(k, k->cur_d, k->cur_er);
        }
        k->have_cur = 1;
        k->cur_d = d;
        k->cur_er = er;
    } else if (k->in_burst) {
        if (k->have_cur)
            octet(k, k->cur_d, k->cur_er);
        k->have_cur = 0;
        return burst_end(k, sn);
    }
    return 0;
}

/* -- the ethernet decoder's record of one frame ------------------------------------------------------------ */

static inline unsigned u16(const uint8_t *d, long long i) { return ((unsigned)d[i] << 8) | d[i + 1]; }

static inline uint32_t u32(const uint8_t *d, long long i)
{
    return ((uint32_t)d[i] << 24) | ((uint32_t)d[i + 1] << 16) | ((uint32_t)d[i + 2] << 8) | d[i + 3];
}

/* 'aa:bb:cc:dd:ee:ff', as the PD's '%02x' (snprintf costs more than the rest of a record). */
static void put_mac(Kernel *k, char *row, int key, const uint8_t *b)
{
    static const char hex[] = "0123456789abcdef";
    char s[17];
    for (int i = 0; i < 6; i++) {
        s[3 * i] = hex[b[i] >> 4];
        s[3 * i + 1] = hex[b[i] & 15];
        if (i < 5)
            s[3 * i + 2] = ':';
    }
    put_text(row, k->col[key], s, 17);
}

/* A dotted quad, as the PD's '%d.%d.%d.%d'. */
static void put_ip(Kernel *k, char *row, int key, const uint8_t *b)
{
    char s[15];
    int len = 0;
    for (int i = 0; i < 4; i++) {
        unsigned v = b[i];
        if (v >= 100)
            s[len++] = (char)('0' + v / 100);
        if (v >= 10)
            s[len++] = (char)('0' + v / 10 % 10);
        s[len++] = (char)('0' + v % 10);
        if (i < 3)
            s[len++] = '.';
    }
    put_text(row, k->col[key], s, len);
}

static inline void put_key(Kernel *k, char *row, int key, long long v) { put_int(row, k->col[key], v); }

/* The PD's num() as the table holds it: a float as an int when it is whole, else Python's round(x, 3)
 * (asked of Python, with the GIL: a PAUSE time is whole at every link rate that divides 512 Gbit/s). */
static int num(Kernel *k, double x, double *out)
{
    double r = rint(x); /* Python's round(): half to even */
    if (fabs(x - r) < 1e-9) {
        *out = r;
        return 0;
    }
    gil_take(k);
    PyObject *f = PyFloat_FromDouble(x), *rounded = f ? PyObject_CallMethod(f, "__round__", "i", 3) : NULL;
    *out = rounded ? PyFloat_AsDouble(rounded) : -1.0;
    int failed = !rounded || PyErr_Occurred();
    Py_XDECREF(f);
    Py_XDECREF(rounded);
    gil_give(k);
    return failed ? -1 : 0;
}

static Datagram *find_datagram(Kernel *k, const Datagram *key, int *index)
{
    for (int i = 0; i < k->ndatagrams; i++) {
        Datagram *g = &k->datagrams[i];
        if (g->src == key->src && g->dst == key->dst && g->proto == key->proto && g->ident == key->ident) {
            *index = i;
            return g;
        }
    }
    return NULL;
}

static void drop_datagram(Kernel *k, int i)
{
    memmove(&k->datagrams[i], &k->datagrams[i + 1], (size_t)(k->ndatagrams - i - 1) * sizeof(Datagram));
    k->ndatagrams--;
}

/* A dict assignment: a known key keeps its place; a full table first drops its oldest entry. */
static void remember_datagram(Kernel *k, const Datagram *g)
{
    int i;
    if (k->ndatagrams >= MAX_DATAGRAMS)
        drop_datagram(k, 0);
    Datagram *have = find_datagram(k, g, &i);
    if (have)
        *have = *g;
    else
        k->datagrams[k->ndatagrams++] = *g;
}

/* UDP over IPv4 (the PD's udp()): ports, and the nicrig header at the start of the payload.
 * Returns 1 when the header was found (*kind, *seq set), else 0. */
static int udp(Kernel *k, char *row, const uint8_t *d, long long u, long long ip_end, int more_fragments,
               unsigned *kind, uint32_t *seq)
{
    if (ip_end - u < 8)
        return 0;
    put_key(k, row, K_UDP_SPORT, u16(d, u));
    put_key(k, row, K_UDP_DPORT, u16(d, u + 2));
    long long ulen = u16(d, u + 4), pl_end;
    if (ulen < 8 || more_fragments)
        pl_end = ip_end;
    else
        pl_end = ip_end < u + ulen ? ip_end : u + ulen;
    long long pl = u + 8;
    if (pl_end - pl >= 16 && u32(d, pl) == NICRIG_MAGIC) {
        *kind = u16(d, pl + 4);
        *seq = u32(d, pl + 8);
        put_key(k, row, K_NICRIG_KIND, *kind);
        put_key(k, row, K_SEQ, *seq);
        return 1;
    }
    return 0;
}

static void ipv4(Kernel *k, char *row, const uint8_t *d, long long p, long long end)
{
    if (end - p < 20)
        return;
    unsigned ver = d[p] >> 4, hl = (d[p] & 15) * 4u;
    if (ver != 4 || hl < 20 || p + hl > end)
        return;
    long long tot = u16(d, p + 2);
    unsigned ff = u16(d, p + 6), mf = (ff >> 13) & 1, fo = ff & 0x1FFF;
    Datagram key = {u32(d, p + 12), u32(d, p + 16), (uint16_t)u16(d, p + 4), 0, d[p + 9], 0};
    put_ip(k, row, K_IP_SRC, d + p + 12);
    put_ip(k, row, K_IP_DST, d + p + 16);
    put_key(k, row, K_IP_PROTO, key.proto);
    put_key(k, row, K_FRAG_OFFSET, fo);
    long long ip_end = (tot < hl || tot > end - p) ? end : p + tot;
    if (key.proto == 17 && fo == 0) {
        unsigned kind;
        uint32_t seq;
        if (udp(k, row, d, p + hl, ip_end, mf, &kind, &seq) && mf) {
            key.kind = (uint16_t)kind;
            key.seq = seq;
            remember_datagram(k, &key);
        }
        return;
    }
    int i;
    Datagram *known = fo ? find_datagram(k, &key, &i) : NULL;
    if (known) {
        put_key(k, row, K_NICRIG_KIND, known->kind);
        put_key(k, row, K_SEQ, known->seq);
        if (!mf)
            drop_datagram(k, i);
    }
}

/* MAC Control (the PD's mac_control()): PAUSE time or the eight PFC times.
 * Returns 1 when the PD would fail on this frame (a PAUSE time it cannot
 * round), 0 when done, -1 on a Python error. */
static int mac_control(Kernel *k, char *row, const uint8_t *d, long long p, long long end)
{
    if (p + 2 > end)
        return 0;
    unsigned op = u16(d, p);
    long long q = p + 2;
    if (op == 0x0001) {
        if (q + 2 > end)
            return 0;
        unsigned quanta = u16(d, q);
        double ns = (double)(quanta * PAUSE_QUANTUM_BITS) * 1e9 / k->link_rate, held;
        if (!isfinite(ns))
            return 1; /* round() raises: the PD's frame() drops the record */
        if (num(k, ns, &held) < 0)
            return -1;
        put_key(k, row, K_PAUSE_QUANTA, quanta);
        put_f64(row, k->col[K_PAUSE_NS], held);
    } else if (op == 0x0101) {
        if (q + 18 > end)
            return 0;
        char text[8 * 6];
        int len = 0;
        for (int c = 0; c < 8; c++)
            len += snprintf(text + len, sizeof(text) - (size_t)len, c ? ",%u" : "%u", u16(d, q + 2 + 2 * c));
        put_text(row, k->col[K_PFC], text, len);
    }
    return 0;
}

/* The MAC header and what follows it (the PD's header()). Returns as mac_control(). */
static int header(Kernel *k, char *row, const uint8_t *d, long long n)
{
    if (n < 6)
        return 0;
    put_mac(k, row, K_DST, d);
    if (n < 12)
        return 0;
    put_mac(k, row, K_SRC, d + 6);
    long long end = n - 4, off = 12;
    int tags = 0;
    while (off + 4 <= end && tags < MAX_TAGS) {
        unsigned tpid = u16(d, off);
        if (tpid != 0x8100 && tpid != 0x88A8)
            break;
        if (tags == 0) {
            put_key(k, row, K_VLAN, u16(d, off + 2) & 0xFFF);
            put_key(k, row, K_ETHERTYPE, tpid);
        }
        tags++;
        off += 4;
    }
    if (off + 2 > end)
        return 0;
    unsigned lt = u16(d, off);
    if (tags == 0)
        put_key(k, row, K_ETHERTYPE, lt);
    put_key(k, row, K_INNER_ETHERTYPE, lt);
    if (lt == 0x8808)
        return mac_control(k, row, d, off + 2, end);
    if (lt == 0x0800)
        ipv4(k, row, d, off + 2, end);
    return 0;
}

/* The frame's row (without the GIL). Returns 0, or -1 with a Python error or out of memory (no error set). */
static int frame_record(Kernel *k, long long es)
{
    long long n = k->n;
    char *row = rows_add(&k->rows);
    if (!row) {
        k->no_memory = 1;
        return -1;
    }
    put_key(k, row, K_SS, k->burst_ss);
    put_key(k, row, K_ES, es);
    put_text(row, k->col[K_DIRECTION], k->direction_utf8, k->direction_len);
    put_key(k, row, K_LENGTH, n);
    put_bool(row, k->col[K_FCS_OK], n >= 4 && (k->crc ^ 0xFFFFFFFFu) == CRC_RESIDUE);
    put_key(k, row, K_ERROR_OCTETS, k->nerr);
    int r = header(k, row, k->head, n);
    if (r != 0)
        rows_drop_last(&k->rows);
    return r < 0 ? -1 : 0;
}

/* -- feeding rows ----------------------------------------------------------------------------------------------- */

static inline uint8_t data_octet(const Kernel *k, const uint8_t *row)
{
    if (k->d_run) {
        unsigned b = row[k->d_byte[0]];
        if (k->d_shift[0])
            b = (b | ((unsigned)row[k->d_byte[0] + 1] << 8)) >> k->d_shift[0];
        return (uint8_t)b;
    }
    unsigned v = 0;
    for (int i = 0; i < 8; i++)
        v |= ((row[k->d_byte[i]] >> k->d_shift[i]) & 1u) << i;
    return (uint8_t)v;
}

#define EN(row) (((row)[k->en_byte] & k->en_mask) != 0)
#define ER(row) (k->has_er && ((row)[k->er_byte] & k->er_mask) != 0)
#define CLK(row) (((row)[k->clk_byte] & k->clk_mask) != 0)

/* The frame's octets while EN stays high, in registers: gmii_clock() and
 * octet() for a clock in the data phase, unrolled. Returns the first row not taken. */
static Py_ssize_t frame_octets(Kernel *k, const uint8_t *buf, Py_ssize_t i, Py_ssize_t rows)
{
    const int us = k->unitsize;
    uint32_t crc = k->crc;
    long long n = k->n, nerr = k->nerr;
    uint8_t d = k->cur_d;
    int er = k->cur_er;
    for (; i < rows; i++) {
        const uint8_t *row = buf + (size_t)i * us;
        if (!EN(row))
            break;
        if (n < HEAD_OCTETS)
            k->head[n] = d;
        crc = crc_table[(crc ^ d) & 0xFF] ^ (crc >> 8);
        n++;
        nerr += er;
        d = data_octet(k, row);
        er = ER(row);
    }
    k->crc = crc;
    k->n = n;
    k->nerr = nerr;
    k->cur_d = d;
    k->cur_er = er;
    return i;
}

static int feed_state(Kernel *k, const uint8_t *buf, Py_ssize_t rows, long long base)
{
    const int us = k->unitsize;
    Py_ssize_t i = 0;
    while (i < rows) {
        if (k->in_burst && k->phase == PH_DATA && k->have_cur) {
            i = frame_octets(k, buf, i, rows);
            if (i == rows)
                break;
        } else if (!k->in_burst) {
            /* Outside a burst only EN high matters: skip to it. */
            const uint8_t *p = buf + (size_t)i * us + k->en_byte;
            while (i < rows && !(*p & k->en_mask)) {
                i++;
                p += us;
            }
            if (i == rows)
                break;
        }
        const uint8_t *row = buf + (size_t)i * us;
        int en = EN(row);
        if (gmii_clock(k, base + i, en, en && ER(row), data_octet(k, row)) < 0)
            return -1;
        i++;
    }
    return 0;
}

static int feed_timing(Kernel *k, const uint8_t *buf, Py_ssize_t rows, long long base)
{
    const int us = k->unitsize;
    int old = k->clk_old;
    for (Py_ssize_t i = 0; i < rows; i++) {
        const uint8_t *row = buf + (size_t)i * us;
        int clk = CLK(row);
        if (clk && !old) {
            int en = EN(row);
            if ((en || k->in_burst) && gmii_clock(k, base + i, en, en && ER(row), data_octet(k, row)) < 0) {
                k->clk_old = clk;
                return -1;
            }
        }
        old = clk;
    }
    k->clk_old = old;
    return 0;
}

static int refuse_if_busy(Kernel *k)
{
    if (k->busy)
        PyErr_SetString(PyExc_RuntimeError, "the kernel is being fed in another thread");
    return k->busy;
}

static PyObject *Kernel_feed(Kernel *k, PyObject *arg)
{
    if (refuse_if_busy(k))
        return NULL;
    if (!k->rows.defaults) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel was not set up (__init__ failed or was not called)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % k->unitsize) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "a block of %zd bytes is not whole rows of %d bytes", view.len, k->unitsize);
        return NULL;
    }
    Py_ssize_t rows = view.len / k->unitsize;
    const uint8_t *buf = view.buf;
    long long base = k->next;
    int r = 0;
    if (rows > 0) {
        if (!k->started) {
            /* The PD's first wait() returns the first row: EN there means the capture began in a burst. */
            k->started = 1;
            k->en_at_start = EN(buf);
            k->clk_old = k->has_clk ? CLK(buf) : 0;
        }
        k->busy = 1;
        if (rows > 4096)
            k->released = PyEval_SaveThread();
        r = k->state_mode ? feed_state(k, buf, rows, base) : feed_timing(k, buf, rows, base);
        if (k->released) {
            PyEval_RestoreThread(k->released);
            k->released = NULL;
        }
        k->busy = 0;
        k->next += rows;
    }
    PyBuffer_Release(&view);
    if (r < 0) {
        if (k->no_memory) {
            k->no_memory = 0;
            return PyErr_NoMemory();
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Kernel_take(Kernel *k, PyObject *unused)
{
    if (refuse_if_busy(k))
        return NULL;
    if (!k->rows.defaults) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel was not set up (__init__ failed or was not called)");
        return NULL;
    }
    return rows_take(&k->rows);
}

/* The state the records after an idle gap depend on besides the samples after it: the ethernet
 * decoder's table of fragmented datagrams (the gmii decoder's own state is the same in every gap: no
 * burst open). The batch planner cuts a source in gaps and compares this at each cut between the chunk
 * that ends there and the one that starts there (decoders/batch.py). */
static PyObject *Kernel_carried(Kernel *k, PyObject *unused)
{
    if (refuse_if_busy(k))
        return NULL;
    PyObject *table = PyTuple_New(k->ndatagrams);
    if (!table)
        return NULL;
    for (int i = 0; i < k->ndatagrams; i++) {
        const Datagram *g = &k->datagrams[i];
        PyObject *t = Py_BuildValue("(kkIIIk)", (unsigned long)g->src, (unsigned long)g->dst, (unsigned)g->ident,
                                    (unsigned)g->proto, (unsigned)g->kind, (unsigned long)g->seq);
        if (!t) {
            Py_DECREF(table);
            return NULL;
        }
        PyTuple_SET_ITEM(table, i, t);
    }
    return Py_BuildValue("(iN)", k->in_burst, table);
}

/* carry(state): start from what carried() gave at the same sample of another run (before the first feed). */
static PyObject *Kernel_carry(Kernel *k, PyObject *arg)
{
    if (refuse_if_busy(k))
        return NULL;
    int in_burst;
    PyObject *table;
    if (k->started) {
        PyErr_SetString(PyExc_RuntimeError, "carry() after feed()");
        return NULL;
    }
    if (!PyTuple_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "carry(): a state as carried() gives it");
        return NULL;
    }
    if (!PyArg_ParseTuple(arg, "pO!", &in_burst, &PyTuple_Type, &table))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(table);
    if (in_burst || n > MAX_DATAGRAMS) {
        PyErr_SetString(PyExc_ValueError, "carry(): a state taken inside a burst, or too many datagrams");
        return NULL;
    }
    Datagram gs[MAX_DATAGRAMS];
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long src, dst, seq;
        unsigned ident, proto, kind;
        PyObject *g = PyTuple_GET_ITEM(table, i);
        if (!PyTuple_Check(g)) {
            PyErr_SetString(PyExc_TypeError, "carry(): a datagram as carried() gives it");
            return NULL;
        }
        if (!PyArg_ParseTuple(g, "kkIIIk", &src, &dst, &ident, &proto, &kind, &seq))
            return NULL;
        if (src > 0xFFFFFFFFul || dst > 0xFFFFFFFFul || seq > 0xFFFFFFFFul || ident > 0xFFFF || proto > 0xFF ||
            kind > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "carry(): a datagram field out of range");
            return NULL;
        }
        gs[i] = (Datagram){(uint32_t)src, (uint32_t)dst, (uint16_t)ident, (uint16_t)kind, (uint8_t)proto,
                           (uint32_t)seq};
    }
    memcpy(k->datagrams, gs, (size_t)n * sizeof(Datagram));
    k->ndatagrams = (int)n;
    Py_RETURN_NONE;
}

/* -- setting up ----------------------------------------------------------------------------------------------------- */

static int bit_of(PyObject *bits, Py_ssize_t i, int unitsize, int optional, int *byte, uint8_t *mask, uint8_t *shift)
{
    long b = PyLong_AsLong(PyTuple_GET_ITEM(bits, i));
    if (b == -1 && PyErr_Occurred())
        return -1;
    if (b < 0 && optional)
        return 0;
    if (b < 0 || b >= 8L * unitsize) {
        PyErr_Format(PyExc_ValueError, "channel bit %ld is outside a %d-byte row", b, unitsize);
        return -1;
    }
    *byte = (int)(b >> 3);
    *mask = (uint8_t)(1u << (b & 7));
    if (shift)
        *shift = (uint8_t)(b & 7);
    return 1;
}

static int Kernel_init(Kernel *k, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bits", "unitsize", "start", "state_mode", "direction", "link_rate", "failed", "layout",
                             "defaults", NULL};
    PyObject *bits, *direction, *failed, *layout, *defaults;
    long long start;
    if (refuse_if_busy(k))
        return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iLpUdOOO!", kwlist, &PyTuple_Type, &bits, &k->unitsize, &start,
                                     &k->state_mode, &direction, &k->link_rate, &failed, &layout, &PyBytes_Type,
                                     &defaults))
        return -1;
    if (PyTuple_GET_SIZE(bits) != 11) {
        PyErr_SetString(PyExc_ValueError, "bits: (en, d0..d7, er, clk), -1 where not connected");
        return -1;
    }
    if (k->unitsize < 1) {
        PyErr_SetString(PyExc_ValueError, "unit size must be at least 1 byte");
        return -1;
    }
    uint8_t mask;
    if (bit_of(bits, 0, k->unitsize, 0, &k->en_byte, &k->en_mask, NULL) < 0)
        return -1;
    k->d_run = 1;
    for (int i = 0; i < 8; i++) {
        if (bit_of(bits, 1 + i, k->unitsize, 0, &k->d_byte[i], &mask, &k->d_shift[i]) < 0)
            return -1;
        int b = k->d_byte[i] * 8 + k->d_shift[i];
        if (b != k->d_byte[0] * 8 + k->d_shift[0] + i)
            k->d_run = 0;
    }
    int r = bit_of(bits, 9, k->unitsize, 1, &k->er_byte, &k->er_mask, NULL);
    if (r < 0)
        return -1;
    k->has_er = r;
    r = bit_of(bits, 10, k->unitsize, 1, &k->clk_byte, &k->clk_mask, NULL);
    if (r < 0)
        return -1;
    k->has_clk = r;
    if (!k->state_mode && !k->has_clk) {
        PyErr_SetString(PyExc_ValueError, "timing mode needs the CLK channel");
        return -1;
    }
    Py_INCREF(direction);
    Py_XSETREF(k->direction, direction);
    k->direction_valid = PyUnicode_CompareWithASCIIString(direction, "tx") == 0 ||
                         PyUnicode_CompareWithASCIIString(direction, "rx") == 0;
    PyObject *utf8 = PyUnicode_AsEncodedString(direction, "utf-8", "replace");
    if (!utf8)
        return -1;
    Py_ssize_t len = PyBytes_GET_SIZE(utf8);
    k->direction_len = len < MAX_DIRECTION ? len : MAX_DIRECTION;
    memcpy(k->direction_utf8, PyBytes_AS_STRING(utf8), (size_t)k->direction_len);
    Py_DECREF(utf8);
    Py_INCREF(failed);
    Py_XSETREF(k->failed, failed);
    rows_free(&k->rows);
    if (rows_init(&k->rows, k->col, COLUMNS, K_COUNT, layout, defaults) < 0)
        return -1;
    k->next = start;
    return 0;
}

static void Kernel_dealloc(Kernel *k)
{
    Py_XDECREF(k->direction);
    Py_XDECREF(k->failed);
    rows_free(&k->rows);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static PyMethodDef Kernel_methods[] = {
    {"feed", (PyCFunction)Kernel_feed, METH_O, "feed(rows): the next block of packed sample rows"},
    {"take", (PyCFunction)Kernel_take, METH_NOARGS,
     "take() -> the table rows of the frames recorded since the last take(), in the PD's order (a bytearray)"},
    {"carried", (PyCFunction)Kernel_carried, METH_NOARGS, "carried() -> (in a burst, fragmented datagrams)"},
    {"carry", (PyCFunction)Kernel_carry, METH_O, "carry(state): start from another run's carried() state"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.decoders._gmii_kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kernel(bits, unitsize, start, state_mode, direction, link_rate, failed, layout, defaults): "
              "the ethernet table's rows from packed gmii rows",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gmii_kernel", "The gmii,ethernet decoder stack's table rows from packed sample rows", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__gmii_kernel(void)
{
    make_crc_table();
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
