/*
 * The native kernel of the gmii,ethernet decoder stack: packed sample rows in,
 * the ethernet decoder's records out (decoders/gmii/pd.py and
 * decoders/ethernet/pd.py are the reference; tests/test_kernel_link.py holds
 * this file byte-identical to them).
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
 * Memory is bounded by that state whatever the bursts and the data: records
 * are the only thing that grows.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HEAD_OCTETS 160
#define MAX_TAGS 8
#define MAX_DATAGRAMS 256
#define PREAMBLE_OCTET 0x55
#define SFD_OCTET 0xD5
#define CRC_RESIDUE 0x2144DF1Cu /* zlib.crc32 of a frame with a good FCS */
#define NICRIG_MAGIC 0x4E524731u
#define PAUSE_QUANTUM_BITS 512

enum { PH_PRE, PH_DATA, PH_SKIP };

/* The ethernet decoder's record keys, in the order of its dict literal. */
enum {
    K_SS, K_ES, K_DIRECTION, K_LENGTH, K_DST, K_SRC, K_VLAN, K_ETHERTYPE, K_INNER_ETHERTYPE, K_FCS_OK,
    K_ERROR_OCTETS, K_PAUSE_QUANTA, K_PAUSE_NS, K_PFC, K_IP_SRC, K_IP_DST, K_IP_PROTO, K_FRAG_OFFSET,
    K_UDP_SPORT, K_UDP_DPORT, K_NICRIG_KIND, K_SEQ, K_COUNT
};
static const char *const KEY_NAMES[K_COUNT] = {
    "ss", "es", "direction", "length", "dst", "src", "vlan", "ethertype", "inner_ethertype", "fcs_ok",
    "error_octets", "pause_quanta", "pause_ns", "pfc", "ip_src", "ip_dst", "ip_proto", "frag_offset",
    "udp_sport", "udp_dport", "nicrig_kind", "seq",
};
static PyObject *keys[K_COUNT];
static PyObject *template_rec; /* every key with the decoder's default value */
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
    int direction_valid;     /* 'tx' or 'rx': anything else fails the PD at its second burst */
    double link_rate;
    PyObject *failed;        /* exception class for a PD failure */
    PyObject *records;       /* list of dicts */
    PyThreadState *released; /* set while feed() runs without the GIL */
    int busy;                /* in feed(): another thread must not feed or finish meanwhile */
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
 * meanwhile); it is taken back for each record and error. */
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

static int set_item(PyObject *rec, int key, PyObject *value)
{
    if (!value)
        return -1;
    int r = PyDict_SetItem(rec, keys[key], value);
    Py_DECREF(value);
    return r;
}

static int set_int(PyObject *rec, int key, long long v) { return set_item(rec, key, PyLong_FromLongLong(v)); }

/* 'aa:bb:cc:dd:ee:ff', as the PD's '%02x' (snprintf costs more than the rest of a record). */
static int set_mac(PyObject *rec, int key, const uint8_t *b)
{
    static const char hex[] = "0123456789abcdef";
    char s[17];
    for (int i = 0; i < 6; i++) {
        s[3 * i] = hex[b[i] >> 4];
        s[3 * i + 1] = hex[b[i] & 15];
        if (i < 5)
            s[3 * i + 2] = ':';
    }
    return set_item(rec, key, PyUnicode_FromStringAndSize(s, 17));
}

/* A dotted quad, as the PD's '%d.%d.%d.%d'. */
static int set_ip(PyObject *rec, int key, const uint8_t *b)
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
    return set_item(rec, key, PyUnicode_FromStringAndSize(s, len));
}

/* The PD's num(): a float as an int when it is whole, else Python's round(x, 3). */
static PyObject *num(double x)
{
    double r = rint(x); /* Python's round(): half to even */
    if (fabs(x - r) < 1e-9)
        return PyLong_FromDouble(r);
    PyObject *f = PyFloat_FromDouble(x);
    if (!f)
        return NULL;
    PyObject *out = PyObject_CallMethod(f, "__round__", "i", 3);
    Py_DECREF(f);
    return out;
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
 * Returns 1 when the header was found (*kind, *seq set), 0 when not, -1 on error. */
static int udp(PyObject *rec, const uint8_t *d, long long u, long long ip_end, int more_fragments,
               unsigned *kind, uint32_t *seq)
{
    if (ip_end - u < 8)
        return 0;
    if (set_int(rec, K_UDP_SPORT, u16(d, u)) < 0 || set_int(rec, K_UDP_DPORT, u16(d, u + 2)) < 0)
        return -1;
    long long ulen = u16(d, u + 4), pl_end;
    if (ulen < 8 || more_fragments)
        pl_end = ip_end;
    else
        pl_end = ip_end < u + ulen ? ip_end : u + ulen;
    long long pl = u + 8;
    if (pl_end - pl >= 16 && u32(d, pl) == NICRIG_MAGIC) {
        *kind = u16(d, pl + 4);
        *seq = u32(d, pl + 8);
        if (set_int(rec, K_NICRIG_KIND, *kind) < 0 || set_int(rec, K_SEQ, *seq) < 0)
            return -1;
        return 1;
    }
    return 0;
}

static int ipv4(Kernel *k, PyObject *rec, const uint8_t *d, long long p, long long end)
{
    if (end - p < 20)
        return 0;
    unsigned ver = d[p] >> 4, hl = (d[p] & 15) * 4u;
    if (ver != 4 || hl < 20 || p + hl > end)
        return 0;
    long long tot = u16(d, p + 2);
    unsigned ff = u16(d, p + 6), mf = (ff >> 13) & 1, fo = ff & 0x1FFF;
    Datagram key = {u32(d, p + 12), u32(d, p + 16), (uint16_t)u16(d, p + 4), 0, d[p + 9], 0};
    if (set_ip(rec, K_IP_SRC, d + p + 12) < 0 || set_ip(rec, K_IP_DST, d + p + 16) < 0 ||
        set_int(rec, K_IP_PROTO, key.proto) < 0 || set_int(rec, K_FRAG_OFFSET, fo) < 0)
        return -1;
    long long ip_end = (tot < hl || tot > end - p) ? end : p + tot;
    if (key.proto == 17 && fo == 0) {
        unsigned kind;
        uint32_t seq;
        int found = udp(rec, d, p + hl, ip_end, mf, &kind, &seq);
        if (found < 0)
            return -1;
        if (mf && found) {
            key.kind = (uint16_t)kind;
            key.seq = seq;
            remember_datagram(k, &key);
        }
        return 0;
    }
    int i;
    Datagram *known = fo ? find_datagram(k, &key, &i) : NULL;
    if (known) {
        if (set_int(rec, K_NICRIG_KIND, known->kind) < 0 || set_int(rec, K_SEQ, known->seq) < 0)
            return -1;
        if (!mf)
            drop_datagram(k, i);
    }
    return 0;
}

/* MAC Control (the PD's mac_control()): PAUSE time or the eight PFC times.
 * Returns 1 when the PD would fail on this frame (a PAUSE time it cannot
 * round), 0 when done, -1 on error. */
static int mac_control(Kernel *k, PyObject *rec, const uint8_t *d, long long p, long long end)
{
    if (p + 2 > end)
        return 0;
    unsigned op = u16(d, p);
    long long q = p + 2;
    if (op == 0x0001) {
        if (q + 2 > end)
            return 0;
        unsigned quanta = u16(d, q);
        double ns = (double)(quanta * PAUSE_QUANTUM_BITS) * 1e9 / k->link_rate;
        if (!isfinite(ns))
            return 1; /* round() raises: the PD's frame() drops the record */
        if (set_int(rec, K_PAUSE_QUANTA, quanta) < 0 || set_item(rec, K_PAUSE_NS, num(ns)) < 0)
            return -1;
    } else if (op == 0x0101) {
        if (q + 18 > end)
            return 0;
        PyObject *times = PyList_New(8);
        if (!times)
            return -1;
        for (int c = 0; c < 8; c++) {
            PyObject *t = PyLong_FromLong(u16(d, q + 2 + 2 * c));
            if (!t) {
                Py_DECREF(times);
                return -1;
            }
            PyList_SET_ITEM(times, c, t);
        }
        if (set_item(rec, K_PFC, times) < 0)
            return -1;
    }
    return 0;
}

/* The MAC header and what follows it (the PD's header()). Returns as mac_control(). */
static int header(Kernel *k, PyObject *rec, const uint8_t *d, long long n)
{
    if (n < 6)
        return 0;
    if (set_mac(rec, K_DST, d) < 0)
        return -1;
    if (n < 12)
        return 0;
    if (set_mac(rec, K_SRC, d + 6) < 0)
        return -1;
    long long end = n - 4, off = 12;
    int tags = 0;
    while (off + 4 <= end && tags < MAX_TAGS) {
        unsigned tpid = u16(d, off);
        if (tpid != 0x8100 && tpid != 0x88A8)
            break;
        if (tags == 0 && (set_int(rec, K_VLAN, u16(d, off + 2) & 0xFFF) < 0 || set_int(rec, K_ETHERTYPE, tpid) < 0))
            return -1;
        tags++;
        off += 4;
    }
    if (off + 2 > end)
        return 0;
    unsigned lt = u16(d, off);
    if ((tags == 0 && set_int(rec, K_ETHERTYPE, lt) < 0) || set_int(rec, K_INNER_ETHERTYPE, lt) < 0)
        return -1;
    if (lt == 0x8808)
        return mac_control(k, rec, d, off + 2, end);
    if (lt == 0x0800)
        return ipv4(k, rec, d, off + 2, end);
    return 0;
}

static int build_record(Kernel *k, long long es)
{
    long long n = k->n;
    int fcs_ok = n >= 4 && (k->crc ^ 0xFFFFFFFFu) == CRC_RESIDUE;
    PyObject *rec = PyDict_Copy(template_rec);
    if (!rec)
        return -1;
    int r = -1;
    if (set_int(rec, K_SS, k->burst_ss) < 0 || set_int(rec, K_ES, es) < 0 ||
        PyDict_SetItem(rec, keys[K_DIRECTION], k->direction) < 0 || set_int(rec, K_LENGTH, n) < 0 ||
        PyDict_SetItem(rec, keys[K_FCS_OK], fcs_ok ? Py_True : Py_False) < 0 ||
        set_int(rec, K_ERROR_OCTETS, k->nerr) < 0)
        goto done;
    r = header(k, rec, k->head, n);
    if (r == 0)
        r = PyList_Append(k->records, rec);
    else if (r == 1)
        r = 0;
done:
    Py_DECREF(rec);
    return r;
}

static int frame_record(Kernel *k, long long es)
{
    gil_take(k);
    int r = build_record(k, es);
    gil_give(k);
    return r;
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
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Kernel_finish(Kernel *k, PyObject *unused)
{
    /* A burst still open is a truncated frame, which the ethernet decoder does not record. */
    if (refuse_if_busy(k))
        return NULL;
    PyObject *out = k->records;
    k->records = PyList_New(0);
    if (!k->records) {
        k->records = out;
        return NULL;
    }
    return out;
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
    static char *kwlist[] = {"bits", "unitsize", "start", "state_mode", "direction", "link_rate", "failed", NULL};
    PyObject *bits, *direction, *failed;
    long long start;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iLpUdO", kwlist, &PyTuple_Type, &bits, &k->unitsize, &start,
                                     &k->state_mode, &direction, &k->link_rate, &failed))
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
    Py_INCREF(failed);
    Py_XSETREF(k->failed, failed);
    Py_XSETREF(k->records, PyList_New(0));
    if (!k->records)
        return -1;
    k->next = start;
    return 0;
}

static void Kernel_dealloc(Kernel *k)
{
    Py_XDECREF(k->direction);
    Py_XDECREF(k->failed);
    Py_XDECREF(k->records);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static PyMethodDef Kernel_methods[] = {
    {"feed", (PyCFunction)Kernel_feed, METH_O, "feed(rows): the next block of packed sample rows"},
    {"finish", (PyCFunction)Kernel_finish, METH_NOARGS, "finish() -> the records since the last finish()"},
    {"carried", (PyCFunction)Kernel_carried, METH_NOARGS, "carried() -> (in a burst, fragmented datagrams)"},
    {"carry", (PyCFunction)Kernel_carry, METH_O, "carry(state): start from another run's carried() state"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.decoders._gmii_kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kernel(bits, unitsize, start, state_mode, direction, link_rate, failed): gmii,ethernet records",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gmii_kernel", "The gmii,ethernet decoder stack's records from packed sample rows", -1,
    NULL,
};

static int make_template(void)
{
    template_rec = PyDict_New();
    if (!template_rec)
        return -1;
    for (int i = 0; i < K_COUNT; i++) {
        keys[i] = PyUnicode_InternFromString(KEY_NAMES[i]);
        if (!keys[i])
            return -1;
        PyObject *v;
        switch (i) {
        case K_SS: case K_ES: case K_LENGTH: case K_ERROR_OCTETS:
            v = PyLong_FromLong(0);
            break;
        case K_DIRECTION:
            v = PyUnicode_FromString("");
            break;
        case K_FCS_OK:
            v = Py_NewRef(Py_False);
            break;
        case K_DST: case K_SRC: case K_PFC: case K_IP_SRC: case K_IP_DST:
            v = Py_NewRef(Py_None);
            break;
        default:
            v = PyLong_FromLong(-1);
        }
        if (set_item(template_rec, i, v) < 0)
            return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__gmii_kernel(void)
{
    make_crc_table();
    if (PyType_Ready(&KernelType) < 0 || make_template() < 0)
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
