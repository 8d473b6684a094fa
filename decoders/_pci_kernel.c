/*
 * The PCI decoder's kernel: the rows of the pci table that decoders/pci/pd.py's
 * `records` output gives (decoders/tables.py turns those records into the same
 * columns), at the speed of reading the capture, written straight into the
 * table's layout (_table_rows.h). The contract is in decoders/kernels.py; the
 * Python side, options and channel map, is decoders/pci_kernel.py.
 *
 * This is a port of the PD's record-making path, function for function
 * (process_clock, bus_clock, address_phase, second_address_phase,
 * data_clock, transfer, end_txn, finalize, classify), keeping every piece of
 * state a record depends on and nothing the PD keeps only for annotations
 * (wait-state runs, warning sets of a transaction, glitch counts, interrupt
 * levels). It also reproduces which samples the PD looks at, since that
 * decides the clock numbering in timing mode: the PD's wait() calls with
 * libsigrokdecode 0.5.3's semantics (decoders/_wait.c), as the PD uses them:
 *
 *  - the first wait ({'skip': 0}) returns the first sample; no edge is seen
 *    there; every later match compares a row with the row before it;
 *  - state mode: while want_step() holds, every sample is a clock
 *    ({'skip': 1}); otherwise the next sample on which a watched line
 *    (FRAME#, IRDY#, TRDY#, DEVSEL#, STOP#, PERR#, GNT#, INTx#) changes;
 *  - timing mode: the PD waits for a falling CLK edge or a watched change
 *    ('fall'), then for a rising CLK edge or a change on any connected line
 *    ('rise'); on a rising edge it processes the clock with the pins of its
 *    previous wake-up, which are the row just before the edge on every line
 *    that matters (every connected line is watched in 'rise'); when
 *    want_step() fails it waits for a watched change only ('idle'), after
 *    which the next clock's number comes from the measured period.
 *
 * want_step() reads the PD's deferred annotations (timing mode): the only
 * ones that can be its sole reason to step are the "asserted outside a
 * transaction" warnings of idle_clock() (any warning of a transaction leaves
 * the transaction current or pending; the PERR# and unsynced warnings leave
 * perr_prev or unsynced set), so those are the ones tracked.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_table_rows.h"

/* The PD's channel indices (pd.py: FRAME .. INTA). */
enum {
    FRAME, IRDY, TRDY, DEVSEL, CLK, STOP, AD0,
    CBE0 = AD0 + 64, PAR = CBE0 + 8, PAR64, REQ64, ACK64, REQ, GNT, PERR, INTA,
    NUM_CHANNELS = INTA + 4
};

#define MAX_ROW 256            /* bytes per row, as _wait.c */
#define GNT_HISTORY 8

enum { TERM_NONE = -1, TERM_NORMAL, TERM_RETRY, TERM_DISC_DATA, TERM_DISC_NODATA, TERM_TARGET_ABORT,
       TERM_MASTER_ABORT, NTERMS };
static const char *TERM_NAMES[NTERMS] = {
    "normal", "retry", "disconnect_with_data", "disconnect_without_data", "target_abort", "master_abort",
};
enum { KIND_CONFIG, KIND_CSR, KIND_MSI, KIND_DMA, KIND_UNKNOWN, NKINDS };
static const char *KIND_NAMES[NKINDS] = {"config", "csr", "msi", "dma", "unknown"};
/* The record's keys that are table columns (its data values are not: the table has no column for them). */
enum {
    C_SS, C_ES, C_COMMAND, C_COMMAND_CODE, C_ADDRESS, C_HAS_ADDRESS, C_DAC, C_DATA_PHASES, C_BYTES,
    C_TERMINATION, C_KIND, C_MWAIT, C_TWAIT, C_DEVSEL, C_WIDE, C_PARITY_ERROR, C_STOP, NCOLS
};
static const ColumnSpec COLUMNS[NCOLS] = {
    {"ss", "<i8"}, {"es", "<i8"}, {"command", "|S"}, {"command_code", "<i2"}, {"address", "<u8"},
    {"has_address", "|b1"}, {"dac", "|b1"}, {"data_phases", "<i4"}, {"bytes", "<i8"}, {"termination", "|S"},
    {"kind", "|S"}, {"master_wait_clocks", "<i4"}, {"target_wait_clocks", "<i4"}, {"devsel", "|S"},
    {"wide", "|b1"}, {"parity_error", "|i1"}, {"stop", "|b1"},
};
#define MAX_NAME 64            /* bytes kept of a command or DEVSEL# speed name (columns are narrower) */
typedef struct { char text[MAX_NAME]; Py_ssize_t len; } Name;
enum { WAIT_IDLE, WAIT_FALL, WAIT_RISE, WAIT_STEP };

typedef struct Txn {
    long long serial;          /* 0: free slot */
    long long ss, es;
    int es_set;
    long long last_addr_clock;
    int dac2;                  /* pd: state == 'dac2' */
    int cmd_code;              /* -1: None */
    int have_addr, have_addr_lo;
    uint64_t addr, addr_lo;
    int dac, req64, ack64;
    int gnt_master;            /* -1: None */
    int have_devsel;
    long long devsel_clock;
    long long transfers, bytes, mwait, twait;
    int bytes_known;
    int stop, term, parity_error, frame_off, termination;
    long long final_clock;
} Txn;

typedef struct { long long clock; Txn *t; long long serial; int plo, phi; } ParCheck;
typedef struct { long long clock; Txn *t; long long serial; } Xfer;
typedef struct { uint64_t first, last; } Range;
typedef struct { int src, dst, n; } Segment;   /* n row bits from bit src go to value bits dst.. */
typedef struct { int byte; uint8_t mask; } ByteMask;

typedef struct {
    PyObject_HEAD
    /* configuration */
    int unitsize, state_mode;
    int bit[NUM_CHANNELS];
    int have_ad_lo, have_ad_hi, have_cbe_lo, have_cbe_hi, have_par, have_par64;
    int have_stop, have_perr, have_gnt, have_req64, have_ack64;
    Segment seg_lo[32], seg_hi[32], seg_cbe[8];
    int nseg_lo, nseg_hi, nseg_cbe;
    ByteMask watch[MAX_ROW], rise[MAX_ROW], ctrl[MAX_ROW];
    int nwatch, nrise, nctrl;
    Range *bars, *msi;
    int nbars, nmsi, bars_given;
    unsigned cmds_config, cmds_mem, cmds_io, cmds_mem_write;
    int cmd_dac;
    Name cmd_names[16], devsel_names[5];   /* the PD's, UTF-8 */
    Column col[NCOLS];
    /* the sample stream */
    long long next_sample;     /* absolute sample of the next row fed */
    int started;
    uint8_t prevrow[MAX_ROW];  /* the row before the next one fed */
    uint8_t clockrow[MAX_ROW + 16];  /* the row of the clock being processed, padded for gather() */
    int wait;
    int clk_phase_rise;        /* pd: clk_phase == 'rise' */
    /* pd state (reset()) */
    Txn *txn;
    Txn **pending;
    Py_ssize_t npending, cap_pending;
    ParCheck par[8];           /* pd.par_checks: one is added a clock, those before the last clock dropped */
    int npar;
    Xfer xfer[3];
    int nxfer;
    int have_prev, prev_F, prev_I;
    long long prev_clock, prev_sample, period;
    int have_period, contiguous, need_clock, unsynced, perr_prev, deferred;
    int idle_warned[4];        /* irdy, trdy, devsel, stop */
    long long gnt_s[GNT_HISTORY];
    int gnt_v[GNT_HISTORY], ngnt;
    Txn **free_txns;
    Py_ssize_t nfree, cap_free;
    long long serial;
    Rows rows;                 /* the table rows made so far */
    int busy;                  /* in feed(), without the GIL: no other call may run meanwhile */
    int finished;
} Kernel;

static inline int level(const uint8_t *row, int bit) { return (row[bit >> 3] >> (bit & 7)) & 1; }

/* Parity and bit counts without the popcnt instruction (not in the x86-64 baseline; a libgcc call). */
static inline int parity64(uint64_t x)
{
    x ^= x >> 32;
    x ^= x >> 16;
    x ^= x >> 8;
    x ^= x >> 4;
    return (0x6996 >> (x & 0xf)) & 1;
}

static inline int ones8(unsigned x)
{
    x = x - ((x >> 1) & 0x55);
    x = (x & 0x33) + ((x >> 2) & 0x33);
    return (x + (x >> 4)) & 0x0f;
}

/* The channel is asserted (low); an unconnected one never is. */
static inline int low(const Kernel *k, const uint8_t *row, int ch)
{
    int b = k->bit[ch];
    return b >= 0 && !level(row, b);
}

static inline int changed(const ByteMask *m, int n, const uint8_t *a, const uint8_t *b)
{
    for (int i = 0; i < n; i++)
        if ((a[m[i].byte] ^ b[m[i].byte]) & m[i].mask)
            return 1;
    return 0;
}

/* Row bits gathered by segments into a number. `row` must have 16 readable bytes past its last one
 * (process_clock copies each clock's row into such a buffer). */
static inline uint64_t gather(const uint8_t *row, const Segment *seg, int nseg)
{
    uint64_t v = 0;
    for (int i = 0; i < nseg; i++) {
        int src = seg[i].src, shift = src & 7;
        uint64_t lo, hi;
        memcpy(&lo, row + (src >> 3), 8);
        memcpy(&hi, row + (src >> 3) + 8, 8);
        uint64_t bits = shift ? (lo >> shift) | (hi << (64 - shift)) : lo;
        if (seg[i].n < 64)
            bits &= ((uint64_t)1 << seg[i].n) - 1;
        v |= bits << seg[i].dst;
    }
    return v;
}

/* One clock's pins: the row and the multiplexed bus as numbers, an unconnected line reading 0
 * (pd.value(), pd.cbe()). */
typedef struct {
    const uint8_t *row;
    int gathered;              /* the numbers below are set (bus()) */
    uint64_t ad_lo, ad_hi;     /* AD[31:0] at bits 0..31, AD[63:32] at bits 32..63 */
    unsigned cbe;              /* C/BE#[7:0] */
} Pins;

/* The clock's bus values, gathered when first asked for: a wait state, an idle clock or one that only
 * finishes a transaction needs none. */
static inline Pins *bus(Kernel *k, Pins *p)
{
    if (!p->gathered) {
        uint8_t *padded = k->clockrow;   /* gather() reads 16 bytes past the row */
        memcpy(padded, p->row, k->unitsize);
        memset(padded + k->unitsize, 0, 16);
        p->ad_lo = gather(padded, k->seg_lo, k->nseg_lo);
        p->ad_hi = gather(padded, k->seg_hi, k->nseg_hi);
        p->cbe = (unsigned)gather(padded, k->seg_cbe, k->nseg_cbe);
        p->gathered = 1;
    }
    return p;
}

/* -- transactions ----------------------------------------------------------------------------- */

static Txn *new_txn(Kernel *k)
{
    Txn *t;
    if (k->nfree)
        t = k->free_txns[--k->nfree];
    else if (!(t = PyMem_RawMalloc(sizeof(Txn))))
        return NULL;
    memset(t, 0, sizeof(Txn));
    t->serial = ++k->serial;
    t->cmd_code = -1;
    t->gnt_master = -1;
    t->bytes_known = 1;
    t->term = TERM_NONE;
    t->termination = TERM_NONE;
    return t;
}

static int release_txn(Kernel *k, Txn *t)
{
    t->serial = 0;
    if (k->nfree == k->cap_free) {
        Py_ssize_t cap = k->cap_free ? 2 * k->cap_free : 8;
        Txn **f = PyMem_RawRealloc(k->free_txns, cap * sizeof(Txn *));
        if (!f) {
            PyMem_RawFree(t);
            return 0;
        }
        k->free_txns = f;
        k->cap_free = cap;
    }
    k->free_txns[k->nfree++] = t;
    return 0;
}

static inline Txn *alive(Txn *t, long long serial) { return t && t->serial == serial ? t : NULL; }

static int in_ranges(const Range *r, int n, uint64_t addr)
{
    for (int i = 0; i < n; i++)
        if (r[i].first <= addr && addr <= r[i].last)
            return 1;
    return 0;
}

static int classify(const Kernel *k, const Txn *t)
{
    int code = t->cmd_code;
    if (code >= 0 && (k->cmds_config >> code & 1))
        return KIND_CONFIG;
    if (code >= 0 && t->have_addr) {
        if ((k->cmds_mem >> code & 1) || (k->cmds_io >> code & 1)) {
            if (in_ranges(k->bars, k->nbars, t->addr))
                return KIND_CSR;
            if ((k->cmds_mem_write >> code & 1) && in_ranges(k->msi, k->nmsi, t->addr))
                return KIND_MSI;
            if (!k->bars_given && t->gnt_master == 0)
                return KIND_CSR;
            if (k->bars_given && t->gnt_master == 0)
                return KIND_UNKNOWN;   /* neither the device's nor addressed to it: another agent's */
            if (k->cmds_mem >> code & 1)
                return KIND_DMA;
        }
        return KIND_UNKNOWN;
    }
    if (t->gnt_master >= 0)
        return t->gnt_master ? KIND_DMA : KIND_CSR;
    return KIND_UNKNOWN;
}

/* pd.finalize(): the record's table row, as tables.records_to_columns makes it from the PD's record. */
static int finalize(Kernel *k, Txn *t)
{
    char *row = rows_add(&k->rows);
    if (!row)
        return -1;
    const Column *c = k->col;
    int code = t->cmd_code;
    put_int(row, c[C_SS], t->ss);
    put_int(row, c[C_ES], t->es);
    if (code >= 0) {
        put_text(row, c[C_COMMAND], k->cmd_names[code].text, k->cmd_names[code].len);
        put_int(row, c[C_COMMAND_CODE], code);
    }
    if (t->have_addr) {
        put_u64(row, c[C_ADDRESS], t->addr);
        put_bool(row, c[C_HAS_ADDRESS], 1);
    }
    put_bool(row, c[C_DAC], t->dac);
    put_int(row, c[C_DATA_PHASES], t->transfers);
    if (t->bytes_known && k->have_cbe_lo)
        put_int(row, c[C_BYTES], t->bytes);
    const char *term = TERM_NAMES[t->termination], *kind = KIND_NAMES[classify(k, t)];
    put_text(row, c[C_TERMINATION], term, (Py_ssize_t)strlen(term));
    put_text(row, c[C_KIND], kind, (Py_ssize_t)strlen(kind));
    put_int(row, c[C_MWAIT], t->mwait);
    put_int(row, c[C_TWAIT], t->twait);
    if (t->have_devsel) {
        long long n = t->devsel_clock - t->last_addr_clock;
        const Name *d = &k->devsel_names[n < 1 ? 1 : n > 4 ? 4 : n];
        put_text(row, c[C_DEVSEL], d->text, d->len);
    } else {
        put_text(row, c[C_DEVSEL], "none", 4);
    }
    put_bool(row, c[C_WIDE], t->req64 && (t->ack64 || !t->have_devsel));
    put_int(row, c[C_PARITY_ERROR], t->parity_error != 0);
    put_bool(row, c[C_STOP], t->stop);
    return 0;
}

/* -- the PD's per-clock processing -------------------------------------------------------------- */

static int push_pending(Kernel *k, Txn *t)
{
    if (k->npending == k->cap_pending) {
        Py_ssize_t cap = k->cap_pending ? 2 * k->cap_pending : 8;
        Txn **p = PyMem_RawRealloc(k->pending, cap * sizeof(Txn *));
        if (!p)
            return -1;
        k->pending = p;
        k->cap_pending = cap;
    }
    k->pending[k->npending++] = t;
    return 0;
}

static void schedule_parity(Kernel *k, Txn *t, Pins *p, long long c, int wide)
{
    /* PAR makes the ones of AD[31:0], C/BE#[3:0] and PAR even (PCI 3.0, 3.7.1); PAR64 likewise for the
     * upper half. Both groups are fully connected here (have_par, have_par64). */
    int plo = -1, phi = -1;
    bus(k, p);
    if (k->have_par)
        plo = parity64(p->ad_lo ^ (p->cbe & 0xf));
    if (wide && k->have_par64)
        phi = parity64(p->ad_hi ^ (p->cbe >> 4));
    if ((plo >= 0 || phi >= 0) && k->npar < (int)(sizeof(k->par) / sizeof(k->par[0])))
        k->par[k->npar++] = (ParCheck){c, t, t->serial, plo, phi};
}

static int end_txn(Kernel *k, Txn *t, long long end_clock, int have_es, long long es)
{
    k->txn = NULL;
    if (t->term != TERM_NONE)
        t->termination = t->term;
    else if (!t->have_devsel)
        t->termination = TERM_MASTER_ABORT;
    else
        t->termination = TERM_NORMAL;
    t->final_clock = end_clock + (k->have_perr ? 2 : 1);
    t->es_set = have_es;
    t->es = es;
    return push_pending(k, t);
}

static void idle_clock(Kernel *k, int I, int T, int D, int S)
{
    int on[4] = {I, T, D, S};
    for (int i = 0; i < 4; i++) {
        if (on[i]) {
            if (!k->idle_warned[i]) {
                k->idle_warned[i] = 1;
                if (!k->state_mode)
                    k->deferred = 1;   /* the warning's annotation waits for the next clock */
            }
        } else {
            k->idle_warned[i] = 0;
        }
    }
}

static long long gnt_at(const Kernel *k, long long t)
{
    int v = -1;
    for (int i = 0; i < k->ngnt; i++) {
        if (k->gnt_s[i] <= t)
            v = k->gnt_v[i];
        else
            break;
    }
    return v;
}

static void gnt_change(Kernel *k, long long s, int asserted)
{
    if (k->ngnt == GNT_HISTORY) {
        memmove(k->gnt_s, k->gnt_s + 1, (GNT_HISTORY - 1) * sizeof(long long));
        memmove(k->gnt_v, k->gnt_v + 1, (GNT_HISTORY - 1) * sizeof(int));
        k->ngnt--;
    }
    k->gnt_s[k->ngnt] = s;
    k->gnt_v[k->ngnt++] = asserted;
}

static int address_phase(Kernel *k, Pins *p, long long s, long long c)
{
    bus(k, p);
    Txn *t = new_txn(k);
    if (!t)
        return -1;
    t->ss = s;
    t->last_addr_clock = c;
    k->txn = t;
    memset(k->idle_warned, 0, sizeof(k->idle_warned));
    if (k->have_gnt) {
        long long before = k->state_mode ? s - 1 : k->have_period ? s - k->period - 1 : s - 1;
        int g = (int)gnt_at(k, before);
        t->gnt_master = g >= 0 ? g : low(k, p->row, GNT);
    }
    t->req64 = k->have_req64 && low(k, p->row, REQ64);
    if (k->have_ad_lo) {
        t->addr_lo = p->ad_lo;
        t->have_addr_lo = 1;
        t->addr = t->addr_lo;
        t->have_addr = 1;
    }
    if (k->have_cbe_lo)
        t->cmd_code = (int)(p->cbe & 0xf);
    schedule_parity(k, t, p, c, t->req64);
    if (t->cmd_code == k->cmd_dac) {
        t->dac = 1;
        t->dac2 = 1;
    }
    return 0;
}

/* The bus is idle on clock c: the transaction ended on the clock before, this one is an idle clock. */
static int ended_before(Kernel *k, Txn *t, long long s, long long c, int I, int T, int D, int S)
{
    if (end_txn(k, t, c - 1, 1, s) < 0)
        return -1;
    idle_clock(k, I, T, D, S);
    return 0;
}

static int second_address_phase(Kernel *k, Txn *t, Pins *p, long long s, long long c,
                                int F, int I, int T, int D, int S)
{
    if (!F && !I)
        return ended_before(k, t, s, c, I, T, D, S);
    if (!F)
        t->frame_off = 1;
    bus(k, p);
    if (k->have_ad_lo && t->have_addr_lo) {
        t->addr = (p->ad_lo << 32) | t->addr_lo;
        t->have_addr = 1;
    } else {
        t->have_addr = 0;
    }
    if (k->have_cbe_lo)
        t->cmd_code = (int)(p->cbe & 0xf);
    schedule_parity(k, t, p, c, t->req64);
    t->last_addr_clock = c;
    t->dac2 = 0;
    return 0;
}

static void classify_stop(Txn *t, int T, int D)
{
    if (!D)
        t->term = TERM_TARGET_ABORT;
    else if (T)
        t->term = TERM_DISC_DATA;
    else if (t->transfers == 0)
        t->term = TERM_RETRY;
    else
        t->term = TERM_DISC_NODATA;
}

static void transfer(Kernel *k, Txn *t, Pins *p, long long c)
{
    bus(k, p);
    int wide = t->req64 && k->have_ack64 && low(k, p->row, ACK64);
    if (wide)
        t->ack64 = 1;
    int lanes = wide ? 8 : 4;
    t->transfers++;
    Xfer x = {c, t, t->serial};
    if (k->nxfer == 3) {
        k->xfer[0] = k->xfer[1];
        k->xfer[1] = k->xfer[2];
        k->nxfer = 2;
    }
    k->xfer[k->nxfer++] = x;
    unsigned be = p->cbe & ((1u << lanes) - 1);
    if ((wide && k->have_cbe_hi && k->have_cbe_lo) || (!wide && k->have_cbe_lo))
        t->bytes += lanes - ones8(be);
    else
        t->bytes_known = 0;
    schedule_parity(k, t, p, c, wide);
}

static int data_clock(Kernel *k, Txn *t, Pins *p, long long s, long long c,
                      int F, int I, int T, int D, int S)
{
    if (!F && !I)
        return ended_before(k, t, s, c, I, T, D, S);
    if (F && t->frame_off) {
        if (end_txn(k, t, c - 1, 1, s) < 0)
            return -1;
        return address_phase(k, p, s, c);
    }
    if (!F)
        t->frame_off = 1;
    if (D && !t->have_devsel) {
        t->have_devsel = 1;
        t->devsel_clock = c;
    }
    if (k->have_ack64 && low(k, p->row, ACK64) && t->req64 && D)
        t->ack64 = 1;
    if (S)
        t->stop = 1;

    int done = 0, cat = 0;     /* cat: 0 none, 'm' master wait, 't' target wait */
    if (I && T) {
        done = 1;
        transfer(k, t, p, c);
        if (S && t->term == TERM_NONE)
            classify_stop(t, T, D);
    } else if (I && S) {
        done = 1;
        if (t->term == TERM_NONE)
            classify_stop(t, T, D);
    } else if (S && !D && t->have_devsel && t->term == TERM_NONE) {
        classify_stop(t, T, D);
        cat = 'm';
    } else if (I) {
        cat = 't';
    } else {
        cat = 'm';
        if (!T && !S)
            t->twait++;        /* neither side is ready: a wait state of both */
    }
    if (cat == 'm')
        t->mwait++;
    else if (cat == 't')
        t->twait++;
    if (done && !F)
        return end_txn(k, t, c, 0, 0);
    return 0;
}

static int bus_clock(Kernel *k, Pins *p, long long s, long long c, int F, int I, int T, int D, int S)
{
    Txn *t = k->txn;
    if (t)
        return t->dac2 ? second_address_phase(k, t, p, s, c, F, I, T, D, S)
                       : data_clock(k, t, p, s, c, F, I, T, D, S);
    if (k->unsynced) {
        if (!F && !I)
            k->unsynced = 0;
        else if (F && k->have_prev && !k->prev_F)
            k->unsynced = 0;
        else
            return 0;
    }
    if (F) {
        if (!k->have_prev) {
            if (I || T || D || S) {
                k->unsynced = 1;   /* capture starts inside a transaction */
                return 0;
            }
        } else if (k->prev_F) {
            k->unsynced = 1;       /* FRAME# held over from a transaction given up */
            return 0;
        }
        return address_phase(k, p, s, c);
    }
    if (!k->have_prev && I) {
        k->unsynced = 1;
        return 0;
    }
    idle_clock(k, I, T, D, S);
    return 0;
}

static long long clock_index(Kernel *k, long long s)
{
    if (k->state_mode)
        return s;
    if (!k->have_prev)
        return 0;
    if (k->contiguous) {
        long long p = s - k->prev_sample;
        if (p > 0) {
            k->period = p;
            k->have_period = 1;
        }
        return k->prev_clock + 1;
    }
    if (k->have_period) {
        /* int(round(x)) of a float quotient: round half to even, as nearbyint() by default. */
        long long gap = (long long)nearbyint((double)(s - k->prev_sample) / (double)k->period);
        return k->prev_clock + (gap > 1 ? gap : 1);
    }
    return k->prev_clock + 1000;
}

static int process_clock(Kernel *k, const uint8_t *row, long long s)
{
    const uint8_t *p = row;
    Pins pins = {row, 0, 0, 0, 0};
    long long c = clock_index(k, s);
    k->need_clock = 0;
    k->deferred = 0;
    int F = low(k, p, FRAME), I = low(k, p, IRDY), T = low(k, p, TRDY), D = low(k, p, DEVSEL);
    int S = k->have_stop && low(k, p, STOP);

    for (Py_ssize_t i = 0; i < k->npending; i++)
        if (!k->pending[i]->es_set) {
            k->pending[i]->es = s;
            k->pending[i]->es_set = 1;
        }

    if (k->npar) {
        int keep = 0;
        for (int i = 0; i < k->npar; i++) {
            ParCheck *e = &k->par[i];
            if (e->clock == c - 1) {
                int bad = (e->plo >= 0 && level(p, k->bit[PAR]) != e->plo)
                          || (e->phi >= 0 && level(p, k->bit[PAR64]) != e->phi);
                Txn *t = alive(e->t, e->serial);
                if (bad && t)
                    t->parity_error = 1;
            }
            if (e->clock >= c)
                k->par[keep++] = *e;
        }
        k->npar = keep;
    }

    int perr = k->have_perr && low(k, p, PERR);
    if (perr) {
        for (int i = 0; i < k->nxfer; i++) {
            Txn *t = alive(k->xfer[i].t, k->xfer[i].serial);
            if (k->xfer[i].clock == c - 2 && t)
                t->parity_error = 1;
        }
    }
    k->perr_prev = perr;
    {
        int keep = 0;
        for (int i = 0; i < k->nxfer; i++)
            if (k->xfer[i].clock >= c - 2)
                k->xfer[keep++] = k->xfer[i];
        k->nxfer = keep;
    }

    if (k->npending) {
        Py_ssize_t keep = 0;
        for (Py_ssize_t i = 0; i < k->npending; i++) {
            Txn *t = k->pending[i];
            if (c >= t->final_clock) {
                if (finalize(k, t) < 0)
                    return -1;
                release_txn(k, t);
            } else {
                k->pending[keep++] = t;
            }
        }
        k->npending = keep;
    }

    if (bus_clock(k, &pins, s, c, F, I, T, D, S) < 0)
        return -1;

    k->have_prev = 1;
    k->prev_F = F;
    k->prev_I = I;
    k->prev_clock = c;
    k->prev_sample = s;
    k->contiguous = 1;
    return 0;
}

static int want_step(const Kernel *k)
{
    if (k->txn || k->npending || k->deferred || k->npar)
        return 1;
    if (k->unsynced || !k->have_prev)
        return 1;
    if (k->prev_F || k->prev_I || k->perr_prev)
        return 1;
    if (!k->state_mode && (k->need_clock || !k->have_period))
        return 1;
    return 0;
}

/* pd.observe() at a wake-up on row `row` (`before`: the row before it): GNT# history, and whether a bus
 * control line changed (timing mode then needs a clock). */
static inline void observe(Kernel *k, const uint8_t *row, const uint8_t *before, long long s)
{
    if (k->have_gnt) {
        int b = k->bit[GNT];
        if (level(row, b) != level(before, b))
            gnt_change(k, s, !level(row, b));
    }
    if (changed(k->ctrl, k->nctrl, row, before))
        k->need_clock = 1;
}

/* -- the sample stream ------------------------------------------------------------------------------ */

static int next_wait(Kernel *k)
{
    if (want_step(k))
        return k->state_mode ? WAIT_STEP : (k->clk_phase_rise ? WAIT_RISE : WAIT_FALL);
    k->contiguous = 0;
    return WAIT_IDLE;
}

static int feed_rows(Kernel *k, const uint8_t *buf, Py_ssize_t nrows)
{
    const int u = k->unitsize;
    const int clk = k->bit[CLK];
    Py_ssize_t i = 0;
    if (!k->started) {
        /* pd.decode(): wait({'skip': 0}) returns the first sample; setup(). */
        k->started = 1;
        if (k->have_gnt)
            gnt_change(k, -1, !level(buf, k->bit[GNT]));
        k->clk_phase_rise = 1;
        if (k->state_mode && process_clock(k, buf, k->next_sample) < 0)
            return -1;
        k->wait = next_wait(k);
        memcpy(k->prevrow, buf, u);
        i = 1;
        k->next_sample++;
    }
    long long s0 = k->next_sample - i;     /* absolute sample of buf's first row */
    for (; i < nrows; i++) {
        const uint8_t *row = buf + i * u;
        const uint8_t *before = i ? row - u : k->prevrow;
        long long s = s0 + i;
        switch (k->wait) {
        case WAIT_IDLE:
            if (!changed(k->watch, k->nwatch, row, before)) {
                /* Quiet rows: nothing the PD waits for can happen on them. */
                Py_ssize_t j = i + 1;
                while (j < nrows && !changed(k->watch, k->nwatch, buf + j * u, buf + (j - 1) * u))
                    j++;
                i = j - 1;
                continue;
            }
            if (k->state_mode) {
                observe(k, row, before, s);
                if (process_clock(k, row, s) < 0)
                    return -1;
            } else {
                observe(k, row, before, s);
                k->clk_phase_rise = 1;
            }
            break;
        case WAIT_STEP:
            observe(k, row, before, s);
            if (process_clock(k, row, s) < 0)
                return -1;
            break;
        case WAIT_FALL: {
            int fell = clk >= 0 && level(before, clk) && !level(row, clk);
            if (!fell && !changed(k->watch, k->nwatch, row, before))
                continue;
            if (fell)
                k->clk_phase_rise = 1;
            observe(k, row, before, s);
            break;
        }
        case WAIT_RISE: {
            int rose = clk >= 0 && !level(before, clk) && level(row, clk);
            if (!rose && !changed(k->rise, k->nrise, row, before))
                continue;
            if (rose) {
                /* The bus value of the clock: the row before the edge (setup time, zero hold). */
                if (process_clock(k, before, s) < 0)
                    return -1;
                k->clk_phase_rise = 0;
            }
            observe(k, row, before, s);
            break;
        }
        }
        k->wait = next_wait(k);
    }
    memcpy(k->prevrow, buf + (nrows - 1) * u, u);
    k->next_sample = s0 + nrows;
    return 0;
}

/* -- Python type ------------------------------------------------------------------------------------- */

static int byte_masks(Kernel *k, const int *chans, int nchans, ByteMask *out)
{
    uint8_t m[MAX_ROW] = {0};
    for (int i = 0; i < nchans; i++) {
        int b = k->bit[chans[i]];
        if (b >= 0)
            m[b >> 3] |= (uint8_t)(1u << (b & 7));
    }
    int n = 0;
    for (int j = 0; j < k->unitsize; j++)
        if (m[j])
            out[n++] = (ByteMask){j, m[j]};
    return n;
}

/* Channels first..first+n-1, mapped to row bits, as runs of consecutive bits landing at value bits dst0.. */
static int segments(const Kernel *k, int first, int n, int dst0, Segment *out)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        int b = k->bit[first + i];
        if (b < 0)
            continue;
        if (count && out[count - 1].src + out[count - 1].n == b && out[count - 1].dst + out[count - 1].n == dst0 + i)
            out[count - 1].n++;
        else
            out[count++] = (Segment){b, dst0 + i, 1};
    }
    return count;
}

static unsigned code_set(PyObject *seq)
{
    unsigned m = 0;
    PyObject *fast = PySequence_Fast(seq, "a command set must be a sequence of ints");
    if (!fast)
        return (unsigned)-1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        long c = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (c < 0 || c > 15) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a command code must be 0..15");
            Py_DECREF(fast);
            return (unsigned)-1;
        }
        m |= 1u << c;
    }
    Py_DECREF(fast);
    return m;
}

static int ranges(PyObject *seq, Range **out, int *n)
{
    PyObject *fast = PySequence_Fast(seq, "ranges must be a sequence of (first, last) pairs");
    if (!fast)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len ? len : 1, sizeof(Range));
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned long long a, b;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "KK", &a, &b)) {
            Py_DECREF(fast);
            return -1;
        }
        (*out)[i] = (Range){a, b};
    }
    *n = (int)len;
    Py_DECREF(fast);
    return 0;
}

/* The PD's names as the table holds them: UTF-8 (errors replaced), as tables.records_to_columns encodes them. */
static int names(PyObject *seq, Name *out, int n, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: want %d names", what, n);
        Py_DECREF(fast);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *utf8 = PyUnicode_Check(item) ? PyUnicode_AsEncodedString(item, "utf-8", "replace") : NULL;
        if (!utf8) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: a name is not a str", what);
            Py_DECREF(fast);
            return -1;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(utf8);
        out[i].len = len < MAX_NAME ? len : MAX_NAME;
        memcpy(out[i].text, PyBytes_AS_STRING(utf8), (size_t)out[i].len);
        Py_DECREF(utf8);
    }
    Py_DECREF(fast);
    return 0;
}

static void free_state(Kernel *k)
{
    PyMem_Free(k->bars);
    PyMem_Free(k->msi);
    k->bars = k->msi = NULL;
    PyMem_RawFree(k->txn);
    k->txn = NULL;
    for (Py_ssize_t i = 0; i < k->npending; i++)
        PyMem_RawFree(k->pending[i]);
    PyMem_RawFree(k->pending);
    k->pending = NULL;
    k->npending = k->cap_pending = 0;
    for (Py_ssize_t i = 0; i < k->nfree; i++)
        PyMem_RawFree(k->free_txns[i]);
    PyMem_RawFree(k->free_txns);
    k->free_txns = NULL;
    k->nfree = k->cap_free = 0;
    rows_free(&k->rows);
}

static int Kernel_init(Kernel *k, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bits", "unitsize", "start", "state_mode", "bars", "bars_given", "msi",
                             "cmd_names", "devsel_speeds", "cmds_config", "cmds_mem", "cmds_io",
                             "cmds_mem_write", "cmd_dac", "layout", "defaults", NULL};
    PyObject *bits, *bars, *msi, *cmd_names, *devsel, *c_config, *c_mem, *c_io, *c_memw, *layout, *defaults;
    long long start;
    if (k->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel is being fed in another thread");
        return -1;
    }
    /* Everything a kernel holds is set up anew (a second __init__ starts from nothing). */
    free_state(k);
    memset((char *)k + offsetof(Kernel, unitsize), 0, sizeof(Kernel) - offsetof(Kernel, unitsize));
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiLpOpOOOOOOOiOO!", kwlist, &bits, &k->unitsize, &start,
                                     &k->state_mode, &bars, &k->bars_given, &msi, &cmd_names, &devsel,
                                     &c_config, &c_mem, &c_io, &c_memw, &k->cmd_dac, &layout,
                                     &PyBytes_Type, &defaults))
        return -1;
    if (k->unitsize < 1 || k->unitsize > MAX_ROW) {
        PyErr_Format(PyExc_ValueError, "unit size %d is not 1..%d bytes", k->unitsize, MAX_ROW);
        return -1;
    }
    PyObject *fast = PySequence_Fast(bits, "bits must be a sequence of ints");
    if (!fast)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != NUM_CHANNELS) {
        PyErr_Format(PyExc_ValueError, "want %d channel bits (the pci PD's channels)", NUM_CHANNELS);
        Py_DECREF(fast);
        return -1;
    }
    for (int i = 0; i < NUM_CHANNELS; i++) {
        long b = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((b == -1 && PyErr_Occurred()) || b < -1 || b >= 8L * k->unitsize) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "channel bit %ld is outside a %d-byte row", b, k->unitsize);
            Py_DECREF(fast);
            return -1;
        }
        k->bit[i] = (int)b;
    }
    Py_DECREF(fast);
    if (k->bit[FRAME] < 0 || k->bit[IRDY] < 0 || k->bit[TRDY] < 0 || k->bit[DEVSEL] < 0) {
        PyErr_SetString(PyExc_ValueError, "FRAME#, IRDY#, TRDY# and DEVSEL# must be mapped");
        return -1;
    }
    if ((k->cmds_config = code_set(c_config)) == (unsigned)-1 || (k->cmds_mem = code_set(c_mem)) == (unsigned)-1
        || (k->cmds_io = code_set(c_io)) == (unsigned)-1 || (k->cmds_mem_write = code_set(c_memw)) == (unsigned)-1)
        return -1;
    if (ranges(bars, &k->bars, &k->nbars) < 0 || ranges(msi, &k->msi, &k->nmsi) < 0)
        return -1;
    if (names(cmd_names, k->cmd_names, 16, "cmd_names") < 0 || names(devsel, k->devsel_names, 5, "devsel_speeds") < 0)
        return -1;
    if (rows_init(&k->rows, k->col, COLUMNS, NCOLS, layout, defaults) < 0)
        return -1;

    int all_lo = 1, all_hi = 1;
    for (int i = 0; i < 32; i++) {
        all_lo &= k->bit[AD0 + i] >= 0;
        all_hi &= k->bit[AD0 + 32 + i] >= 0;
    }
    k->have_ad_lo = all_lo;
    k->have_ad_hi = all_hi;
    k->have_cbe_lo = k->bit[CBE0] >= 0 && k->bit[CBE0 + 1] >= 0 && k->bit[CBE0 + 2] >= 0 && k->bit[CBE0 + 3] >= 0;
    k->have_cbe_hi = k->bit[CBE0 + 4] >= 0 && k->bit[CBE0 + 5] >= 0 && k->bit[CBE0 + 6] >= 0 && k->bit[CBE0 + 7] >= 0;
    k->have_par = k->bit[PAR] >= 0 && k->have_ad_lo && k->have_cbe_lo;
    k->have_par64 = k->bit[PAR64] >= 0 && k->have_ad_hi && k->have_cbe_hi;
    k->have_stop = k->bit[STOP] >= 0;
    k->have_perr = k->bit[PERR] >= 0;
    k->have_gnt = k->bit[GNT] >= 0;
    k->have_req64 = k->bit[REQ64] >= 0;
    k->have_ack64 = k->bit[ACK64] >= 0;
    k->nseg_lo = segments(k, AD0, 32, 0, k->seg_lo);
    k->nseg_hi = segments(k, AD0 + 32, 32, 32, k->seg_hi);
    k->nseg_cbe = segments(k, CBE0, 8, 0, k->seg_cbe);

    /* pd.setup(): watch = FRAME#, IRDY#, TRDY#, DEVSEL#, STOP#, PERR#, GNT#, INTx#; a change of one of
     * the first six needs a clock (observe()); 'rise' watches every connected line but CLK. */
    int ctrl[] = {FRAME, IRDY, TRDY, DEVSEL, STOP, PERR};
    int watch[] = {FRAME, IRDY, TRDY, DEVSEL, STOP, PERR, GNT, INTA, INTA + 1, INTA + 2, INTA + 3};
    int all[NUM_CHANNELS], nall = 0;
    for (int c = 0; c < NUM_CHANNELS; c++)
        if (c != CLK)
            all[nall++] = c;
    k->nctrl = byte_masks(k, ctrl, 6, k->ctrl);
    k->nwatch = byte_masks(k, watch, 11, k->watch);
    k->nrise = byte_masks(k, all, nall, k->rise);
    k->next_sample = start;
    return 0;
}

static void Kernel_dealloc(Kernel *k)
{
    free_state(k);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static int usable(Kernel *k)
{
    if (k->busy)
        PyErr_SetString(PyExc_RuntimeError, "the kernel is being fed in another thread");
    else if (!k->rows.defaults)
        PyErr_SetString(PyExc_RuntimeError, "the kernel was not set up (__init__ failed or was not called)");
    else if (k->finished)
        PyErr_SetString(PyExc_RuntimeError, "the kernel has finished");
    else
        return 1;
    return 0;
}

/* Rows are decoded without the GIL: nothing in feed_rows() calls Python (its only failure is memory). */
static PyObject *Kernel_feed(Kernel *k, PyObject *arg)
{
    Py_buffer view;
    if (!usable(k))
        return NULL;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % k->unitsize) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "block length is not a multiple of the unit size");
        return NULL;
    }
    int r = 0;
    if (view.len) {
        k->busy = 1;
        Py_BEGIN_ALLOW_THREADS
        r = feed_rows(k, view.buf, view.len / k->unitsize);
        Py_END_ALLOW_THREADS
        k->busy = 0;
    }
    PyBuffer_Release(&view);
    if (r < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Kernel_take(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    if (!usable(k))
        return NULL;
    return rows_take(&k->rows);
}

static PyObject *Kernel_finish(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    /* The end of the data fails the PD's wait() with a SystemError it does not catch: transactions
     * still open or waiting for PAR/PERR# make no record. */
    if (!usable(k))
        return NULL;
    PyObject *out = rows_take(&k->rows);
    if (out)
        k->finished = 1;
    return out;
}

static PyMethodDef Kernel_methods[] = {
    {"feed", (PyCFunction)Kernel_feed, METH_O, "feed(rows): decode the next packed rows (bytes-like, C-contiguous)"},
    {"take", (PyCFunction)Kernel_take, METH_NOARGS,
     "take() -> the table rows of the records made since the last take(), in the PD's order (a bytearray)"},
    {"finish", (PyCFunction)Kernel_finish, METH_NOARGS, "finish() -> take() at the end of the data; no feed after it"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nicrig.decoders._pci_kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kernel(bits, unitsize, start, state_mode, bars, bars_given, msi, cmd_names, devsel_speeds, "
              "cmds_config, cmds_mem, cmds_io, cmds_mem_write, cmd_dac, layout, defaults): the pci table's rows "
              "from packed rows",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pci_kernel", "The pci decoder's table rows from packed sample rows, in C", -1, NULL,
};

PyMODINIT_FUNC PyInit__pci_kernel(void)
{
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
