/*
 * nicrig.udpmon._engine: the hot loops of udpmon (paced UDP streams,
 * stream reception with kernel timestamps, request-response latency, the
 * responder, and the capture of the wire on a packet socket), written in C so the timing is not at the mercy of the
 * interpreter.
 *
 * Only nicrig.udpmon.engine calls this module; it validates the arguments
 * and turns the bytearrays returned here into NumPy arrays. The checks here
 * are the ones that keep the C code memory-safe; the friendly ones are there.
 *
 * Conventions
 *   - every time is int64 nanoseconds; CLOCK_MONOTONIC unless said otherwise
 *     (kernel software RX timestamps are CLOCK_REALTIME, hardware ones are
 *     the NIC's raw clock);
 *   - the GIL is released around every loop. Called from the main thread
 *     (check_signals), the loop takes it back at least every SLICE_NS (when
 *     it has slack) to run PyErr_CheckSignals(), so a Ctrl-C or an exception
 *     raised by a signal handler ends the call; a signal that interrupts a
 *     blocking call (EINTR) forces that check. Other threads never run signal
 *     handlers, so there the GIL stays released for the whole loop (a GIL
 *     hand-off can cost up to the switch interval, 5 ms, when another Python
 *     thread is busy: a stall in the pacing);
 *   - every loop is bounded by a count and/or a timeout;
 *   - payloads start with the 16-byte header of nicrig/udpmon/payload.py
 *     (network byte order): u32 magic, u16 kind, u16 flags, u32 seq,
 *     u32 test_id. A REQUEST carries u32 response_bytes right after it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef __linux__
#error "nicrig.udpmon._engine needs Linux (recvmmsg, SO_TIMESTAMPING)"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

#define NRG_MAGIC 0x4E524731u
#define HDR_BYTES 16
#define REQ_BYTES 20 /* header + u32 response_bytes */
#define KIND_STREAM 1
#define KIND_REQUEST 2
#define KIND_RESPONSE 3
#define MAX_UDP 65507     /* largest UDP payload over IPv4 */
#define MAX_DGRAM 65535   /* receive buffer that holds any datagram */

#define NS_PER_S 1000000000LL
#define SLICE_NS 100000000LL     /* GIL re-taken at least this often (100 ms) */
#define STOP_CHECK_NS 10000000LL /* blocking receives wake at least this often to check deadlines and the stop pipe (10 ms) */
#define CHECK_SLACK_NS 2000000LL /* ... while waiting only if >= 2 ms of slack */
#define SPIN_NS 50000LL          /* waits shorter than 50 us are pure spins */
#define WAKE_EARLY_NS 20000LL    /* longer ones sleep until >= 20 us before due: */
#define WAKE_EARLY_INIT_NS 100000LL /* 100 us at first, then adapted to the */
#define WAKE_EARLY_MAX_NS 1000000LL /* measured wake-up latency (<= 1 ms) */
#define LEAD_NS 1000000LL        /* default start of a paced stream: now + 1 ms */
#define BATCH 64                 /* recvmmsg batch */
#define SEND_BATCH 32            /* send_paced: packets already due sent in one sendmmsg */
#define DRAIN_BATCHES 16         /* batches read per poll() wake-up */
#define CTRL_BYTES 256           /* control buffer per received message */
#define REQ_READ 64              /* bytes of a request the responder reads */

#ifndef SO_MEMINFO
#define SO_MEMINFO 55
#endif
#define SK_MEMINFO_DROPS_IDX 8
#define SK_MEMINFO_N 9

/* ------------------------------------------------------------------ */
/* clocks, spinning, PRNG, header                                      */

static inline int64_t
clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static inline int64_t
mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* A receive timeout (SO_RCVTIMEO) of ns, at least 1 us: a zero timeval would
 * mean "no timeout at all". */
static inline struct timeval
ns_to_tv(int64_t ns)
{
    struct timeval tv;
    if (ns < 1000)
        ns = 1000;
    tv.tv_sec = (time_t)(ns / NS_PER_S);
    tv.tv_usec = (suseconds_t)((ns % NS_PER_S) / 1000);
    return tv;
}

static inline struct timespec
ns_to_ts(int64_t ns)
{
    struct timespec ts;
    if (ns < 0)
        ns = 0;
    ts.tv_sec = (time_t)(ns / NS_PER_S);
    ts.tv_nsec = (long)(ns % NS_PER_S);
    return ts;
}

static inline uint64_t
splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Fill p[0..n) with xorshift64* output seeded from (seed, test_id, seq):
 * a different byte stream for every packet of a test. */
static void
fill_random(uint8_t *p, size_t n, uint64_t seed, uint32_t test_id, uint32_t seq)
{
    uint64_t s = seed ^ (((uint64_t)test_id << 32) | seq) * 0xD1B54A32D192ED03ULL;
    uint64_t x = splitmix64(&s);
    if (x == 0)
        x = 1;
    while (n >= 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1DULL;
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1DULL;
        memcpy(p, &v, n);
    }
}

static inline void
put_u32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static inline uint32_t
get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static inline void
put_header(uint8_t *p, uint16_t kind, uint32_t seq, uint32_t test_id)
{
    uint16_t k = htons(kind), flags = 0;
    put_u32(p, NRG_MAGIC);
    memcpy(p + 4, &k, 2);
    memcpy(p + 6, &flags, 2);
    put_u32(p + 8, seq);
    put_u32(p + 12, test_id);
}

/* 1 when p[0..len) starts with a nicrig header of test_id (kind and seq
 * returned), 0 otherwise. */
static inline int
get_header(const uint8_t *p, size_t len, uint32_t test_id, uint16_t *kind, uint32_t *seq)
{
    uint16_t k;
    if (len < HDR_BYTES || get_u32(p) != NRG_MAGIC || get_u32(p + 12) != test_id)
        return 0;
    memcpy(&k, p + 4, 2);
    *kind = ntohs(k);
    *seq = get_u32(p + 8);
    return 1;
}

/* ------------------------------------------------------------------ */
/* GIL slices                                                          */

typedef struct {
    PyThreadState *ts; /* NULL while the GIL is held */
    int64_t slice_end; /* take the GIL back (check signals) after this */
    int check;         /* 0: not the main thread, never take it back */
    int64_t early;     /* wait_until: wake this long before due */
    long slack;        /* the thread's timer slack before the loop, -1 unknown */
} gil_t;

static void
gil_release(gil_t *g)
{
    g->ts = PyEval_SaveThread();
    g->slice_end = g->check ? mono_ns() + SLICE_NS : INT64_MAX;
}

/* Start of a loop: release the GIL; timer slack 1 ns (the default 50 us
 * would make every sleep overshoot) for this thread until loop_end(). */
static void
loop_begin(gil_t *g, int check)
{
    g->ts = NULL;
    g->check = check;
    g->early = WAKE_EARLY_INIT_NS;
    g->slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (g->slack >= 0)
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    gil_release(g);
}

static void
gil_acquire(gil_t *g)
{
    if (g->ts) {
        PyEval_RestoreThread(g->ts);
        g->ts = NULL;
    }
}

/* End of a loop (also on errors): GIL held, timer slack restored. */
static void
loop_end(gil_t *g)
{
    gil_acquire(g);
    if (g->slack > 0) {
        prctl(PR_SET_TIMERSLACK, (unsigned long)g->slack, 0, 0, 0);
        g->slack = 0;
    }
}

/* Take the GIL, run pending signal handlers, release it again. -1 (GIL held,
 * exception set) when a handler raised. */
static int
gil_checkpoint(gil_t *g)
{
    if (!g->check) {
        g->slice_end = INT64_MAX;
        return 0;
    }
    gil_acquire(g);
    if (PyErr_CheckSignals() < 0)
        return -1;
    gil_release(g);
    return 0;
}

/* Wait until CLOCK_MONOTONIC >= due: clock_nanosleep until g->early before
 * due when more than SPIN_NS away, then spin. Takes the GIL for a signal
 * check when the slice is over and at least CHECK_SLACK_NS remain. *now
 * gets the clock reading that ended the wait. -1 on interrupt. */
static int
wait_until(gil_t *g, int64_t due, int64_t *now)
{
    for (;;) {
        int64_t t = mono_ns(), rem = due - t;
        if (rem <= 0) {
            *now = t;
            return 0;
        }
        if (t >= g->slice_end && rem > CHECK_SLACK_NS) {
            if (gil_checkpoint(g) < 0)
                return -1;
            continue;
        }
        if (rem > SPIN_NS && rem > g->early) {
            int64_t wake = due - g->early;
            if (rem > CHECK_SLACK_NS && wake > g->slice_end)
                wake = g->slice_end;
            struct timespec ts = ns_to_ts(wake);
            if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
                g->slice_end = g->check ? 0 : INT64_MAX; /* a signal: check it */
                continue;
            }
            /* the margin follows the wake-up latency: twice the last
             * overshoot when that ate over half of it, shrinking by 1/8 per
             * prompt wake-up, within WAKE_EARLY_NS..WAKE_EARLY_MAX_NS */
            int64_t over = mono_ns() - wake;
            if (over > g->early / 2)
                g->early = 2 * over;
            else if (over < g->early / 4)
                g->early -= g->early / 8;
            if (g->early > WAKE_EARLY_MAX_NS)
                g->early = WAKE_EARLY_MAX_NS;
            if (g->early < WAKE_EARLY_NS)
                g->early = WAKE_EARLY_NS;
            continue;
        }
        cpu_relax();
    }
}

/* send() errors that lose one datagram but leave the socket usable. */
static int
transient_send_error(int e)
{
    switch (e) {
    case ENOBUFS:
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ENOMEM:
    case ECONNREFUSED: /* ICMP port unreachable for an earlier datagram */
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
    case EPERM: /* dropped by a firewall rule */
        return 1;
    default:
        return 0;
    }
}

static int
is_eagain(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK;
}

/* A bytearray of n elements of size elem (n may be 0). */
static PyObject *
new_array(Py_ssize_t n, Py_ssize_t elem)
{
    if (n > PY_SSIZE_T_MAX / elem) {
        PyErr_NoMemory();
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n * elem);
}

static PyObject *
set_errno_error(int e)
{
    errno = e;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* ------------------------------------------------------------------ */
/* send_paced                                                          */

PyDoc_STRVAR(send_paced_doc,
"send_paced(fd, count, size, spacing_ns, start_ns, seed, kind, test_id, first_seq,\n"
"           check_signals)\n"
"-> (times: bytearray of int64, errors, last_errno, t0_ns)\n\n"
"Packet i is due at t0 + i*spacing_ns (CLOCK_MONOTONIC; t0 = start_ns, or\n"
"now + 1 ms when start_ns < 0). times[i] is the clock read right before\n"
"send(); -1 when send() failed with a transient error (ENOBUFS, EAGAIN,\n"
"ECONNREFUSED, ...), which are counted and not retried. Other errors raise.");

/* A stream packet: the header, then random fill that differs per packet. */
static void
build_packet(uint8_t *p, Py_ssize_t size, uint16_t kind, uint32_t seq, uint32_t test_id, uint64_t seed)
{
    put_header(p, kind, seq, test_id);
    fill_random(p + HDR_BYTES, (size_t)size - HDR_BYTES, seed, test_id, seq);
}

static PyObject *
send_paced(PyObject *self, PyObject *args)
{
    int fd;
    Py_ssize_t count, size;
    long long spacing, start;
    unsigned long long seed;
    unsigned int kind, test_id, first_seq;
    int check;
    if (!PyArg_ParseTuple(args, "innLLKIIIp", &fd, &count, &size, &spacing, &start, &seed,
                          &kind, &test_id, &first_seq, &check))
        return NULL;
    if (count < 0 || size < HDR_BYTES || size > MAX_UDP || spacing < 0 || kind > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "send_paced: argument out of range");
        return NULL;
    }
    if (count > 0 && spacing > 0 && (count - 1) > INT64_MAX / 4 / spacing) {
        PyErr_SetString(PyExc_ValueError, "send_paced: count * spacing_ns overflows");
        return NULL;
    }
    PyObject *times_obj = new_array(count, 8);
    if (!times_obj)
        return NULL;
    /* packets already due when the sender looks (spacing 0, or catching up)
     * leave together in one sendmmsg() of up to SEND_BATCH */
    uint8_t *buf = PyMem_RawMalloc((size_t)SEND_BATCH * (size_t)size);
    struct mmsghdr *msgs = PyMem_RawCalloc(SEND_BATCH, sizeof *msgs);
    struct iovec *iov = PyMem_RawCalloc(SEND_BATCH, sizeof *iov);
    if (!buf || !msgs || !iov) {
        PyMem_RawFree(buf);
        PyMem_RawFree(msgs);
        PyMem_RawFree(iov);
        Py_DECREF(times_obj);
        return PyErr_NoMemory();
    }
    for (int j = 0; j < SEND_BATCH; j++) {
        iov[j].iov_base = buf + (size_t)j * (size_t)size;
        iov[j].iov_len = (size_t)size;
        msgs[j].msg_hdr.msg_iov = &iov[j];
        msgs[j].msg_hdr.msg_iovlen = 1;
    }
    int64_t *times = (int64_t *)PyByteArray_AS_STRING(times_obj);
    Py_ssize_t errors = 0;
    int last_errno = 0, fatal = 0;
    gil_t g;
    loop_begin(&g, check);
    int64_t t0 = start >= 0 ? (int64_t)start : mono_ns() + LEAD_NS;
    for (Py_ssize_t i = 0; i < count;) {
        /* packet i is built before its wait, so its time excludes the building */
        build_packet(buf, size, (uint16_t)kind, first_seq + (uint32_t)i, test_id, seed);
        int64_t now;
        if (wait_until(&g, t0 + (int64_t)i * spacing, &now) < 0)
            goto interrupted;
        int k = 1;
        while (k < SEND_BATCH && i + k < count && t0 + (int64_t)(i + k) * spacing <= now) {
            build_packet(buf + (size_t)k * (size_t)size, size, (uint16_t)kind, first_seq + (uint32_t)(i + k),
                         test_id, seed);
            k++;
        }
        int r;
        while ((r = sendmmsg(fd, msgs, (unsigned int)k, 0)) < 0 && errno == EINTR)
            g.slice_end = g.check ? 0 : INT64_MAX;
        if (r < 0) { /* the first packet failed: mark it, go on with the next */
            if (!transient_send_error(errno)) {
                fatal = errno;
                break;
            }
            last_errno = errno;
            errors++;
            times[i++] = -1;
        }
        else {
            for (int j = 0; j < r; j++) /* a batch shares the clock read before it */
                times[i + j] = now;
            i += r;
        }
        if (now >= g.slice_end && gil_checkpoint(&g) < 0)
            goto interrupted;
    }
    loop_end(&g);
    PyMem_RawFree(buf);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    if (fatal) {
        Py_DECREF(times_obj);
        return set_errno_error(fatal);
    }
    return Py_BuildValue("NniL", times_obj, errors, last_errno, (long long)t0);

interrupted:
    loop_end(&g);
    PyMem_RawFree(buf);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    Py_DECREF(times_obj);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* receive                                                             */

static int
set_timestamping(int fd, int hw)
{
    int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (hw)
        flags |= SOF_TIMESTAMPING_RX_HARDWARE | SOF_TIMESTAMPING_RAW_HARDWARE;
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags);
}

/* Software (ts[0]) and raw hardware (ts[2]) RX timestamps of a message, ns,
 * -1 when absent; *ovfl gets the SO_RXQ_OVFL counter (datagrams the socket
 * dropped before this one, socket(7)) when the message carries it. */
static void
parse_timestamps(struct msghdr *mh, int64_t *sw, int64_t *hw, long long *ovfl)
{
    *sw = -1;
    *hw = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET)
            continue;
        if (c->cmsg_type == SO_RXQ_OVFL && c->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
            uint32_t d;
            memcpy(&d, CMSG_DATA(c), sizeof d);
            *ovfl = d;
            continue;
        }
        int64_t v[6];
        int got = 0;
#ifdef SO_TIMESTAMPING_NEW
        if (c->cmsg_type == SO_TIMESTAMPING_NEW && c->cmsg_len >= CMSG_LEN(6 * sizeof(int64_t))) {
            memcpy(v, CMSG_DATA(c), sizeof v); /* 3 x __kernel_timespec */
            got = 1;
        }
#endif
#ifdef SO_TIMESTAMPING_OLD
        if (c->cmsg_type == SO_TIMESTAMPING_OLD && c->cmsg_len >= CMSG_LEN(6 * sizeof(long))) {
            long l[6]; /* 3 x __kernel_old_timespec {long sec; long nsec} */
            memcpy(l, CMSG_DATA(c), sizeof l);
            for (int k = 0; k < 6; k++)
                v[k] = l[k];
            got = 1;
        }
#else
        if (c->cmsg_type == SO_TIMESTAMPING && c->cmsg_len >= CMSG_LEN(6 * sizeof(long))) {
            long l[6];
            memcpy(l, CMSG_DATA(c), sizeof l);
            for (int k = 0; k < 6; k++)
                v[k] = l[k];
            got = 1;
        }
#endif
        if (!got)
            continue;
        if (v[0] || v[1])
            *sw = v[0] * NS_PER_S + v[1];
        if (v[4] || v[5])
            *hw = v[4] * NS_PER_S + v[5];
    }
}

/* Datagrams the kernel dropped at this socket since it was created
 * (SO_MEMINFO), -1 when unknown. */
static long long
socket_drops(int fd)
{
    uint32_t mem[SK_MEMINFO_N + 8];
    socklen_t len = sizeof mem;
    memset(mem, 0, sizeof mem);
    if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len) < 0 ||
        len < (SK_MEMINFO_DROPS_IDX + 1) * sizeof(uint32_t))
        return -1;
    return mem[SK_MEMINFO_DROPS_IDX];
}

enum { STOP_COUNT = 0, STOP_IDLE = 1, STOP_FD = 2, STOP_DURATION = 3 };

/* What wait_readable saw: data on fd, nothing before `until`, the stop pipe, or an error. */
enum { WAIT_READY, WAIT_AGAIN, WAIT_STOP, WAIT_ERROR };

/* Sleep in ppoll() until fd is readable, stop_fd (if >= 0) is readable, or `until`
 * (CLOCK_MONOTONIC ns) passes. EINTR asks the loop for a GIL checkpoint and comes
 * back as WAIT_AGAIN, like a timeout; on WAIT_ERROR errno is set. */
static int wait_readable(gil_t *g, int fd, int stop_fd, int64_t until, int64_t now)
{
    struct pollfd pfd[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    struct timespec pts = ns_to_ts(until - now);
    if (ppoll(pfd, stop_fd >= 0 ? 2 : 1, &pts, NULL) < 0) {
        if (errno == EINTR) {
            g->slice_end = g->check ? 0 : INT64_MAX;
            return WAIT_AGAIN;
        }
        return WAIT_ERROR;
    }
    if (stop_fd >= 0 && pfd[1].revents)
        return WAIT_STOP;
    return pfd[0].revents ? WAIT_READY : WAIT_AGAIN;
}

/* 1 when the stop pipe is readable; looked at (a ppoll() that does not wait)
 * only once *next_check has passed, then again STOP_CHECK_NS later, so a
 * loop that does not sleep in ppoll() pays for it once per STOP_CHECK_NS. */
static int
stop_requested(gil_t *g, int stop_fd, int64_t now, int64_t *next_check)
{
    if (stop_fd < 0 || now < *next_check)
        return 0;
    *next_check = now + STOP_CHECK_NS;
    return wait_readable(g, stop_fd, -1, now, now) == WAIT_READY;
}


PyDoc_STRVAR(set_timestamping_doc,
"set_timestamping(fd, hw) -> None\n\n"
"SO_TIMESTAMPING = RX_SOFTWARE|SOFTWARE (+ RX_HARDWARE|RAW_HARDWARE when hw).");

static PyObject *
py_set_timestamping(PyObject *self, PyObject *args)
{
    int fd, hw;
    if (!PyArg_ParseTuple(args, "ip", &fd, &hw))
        return NULL;
    if (set_timestamping(fd, hw) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(receive_doc,
"receive(fd, max_packets, test_id, first_timeout_ns, idle_timeout_ns, stop_fd, hw,\n"
"        max_bytes, keep_bytes, check_signals, busy_poll)\n"
"-> (seq u32, kernel_ns i64, hw_ns i64, user_ns i64, size i32, payload|None,\n"
"    n, foreign, truncated, kernel_drops, stop_reason, rxq_ovfl)\n\n"
"Reads datagrams with recvmmsg (batches of 64, max_bytes read of each; size is\n"
"the true length, truncated counts accepted ones longer than max_bytes) until\n"
"max_packets are accepted, stop_fd is readable (stop_reason 2), or no accepted\n"
"datagram came for first_timeout_ns (before the first) / idle_timeout_ns\n"
"(after it) (stop_reason 1). Accepted = nicrig magic and test_id; anything\n"
"else is counted as foreign. user_ns: CLOCK_MONOTONIC when the recvmmsg call\n"
"that delivered the datagram returned. payload: the first keep_bytes of each\n"
"accepted datagram (zero padded) when keep_bytes > 0. busy_poll: recvmmsg\n"
"(MSG_DONTWAIT) in a spin instead of sleeping in ppoll() (one CPU at 100 %%).\n"
"rxq_ovfl: the socket's SO_RXQ_OVFL drop counter carried by the last\n"
"datagram read (0 when none carried it: the kernel stamps it once nonzero;\n"
"-1 when the kernel does not offer it).");

static PyObject *
receive(PyObject *self, PyObject *args)
{
    int fd, stop_fd, hw;
    Py_ssize_t max_packets, max_bytes, keep_bytes;
    unsigned int test_id;
    long long first_timeout, idle_timeout;
    int check, busy;
    if (!PyArg_ParseTuple(args, "inILLipnnpp", &fd, &max_packets, &test_id, &first_timeout,
                          &idle_timeout, &stop_fd, &hw, &max_bytes, &keep_bytes, &check, &busy))
        return NULL;
    if (max_packets < 0 || first_timeout < 0 || idle_timeout < 0 || max_bytes < HDR_BYTES ||
        max_bytes > MAX_DGRAM || keep_bytes < 0 || keep_bytes > max_bytes) {
        PyErr_SetString(PyExc_ValueError, "receive: argument out of range");
        return NULL;
    }
    if (set_timestamping(fd, hw) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    int one = 1;
    /* the kernel stamps the counter on a datagram only once it is nonzero */
    long long ovfl = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) < 0)
        ovfl = -1; /* not offered */

    PyObject *seq_o = new_array(max_packets, 4), *kern_o = new_array(max_packets, 8),
             *hw_o = new_array(max_packets, 8), *user_o = new_array(max_packets, 8),
             *size_o = new_array(max_packets, 4);
    PyObject *pay_o = keep_bytes ? new_array(max_packets, keep_bytes) : NULL;
    struct mmsghdr *msgs = PyMem_RawCalloc(BATCH, sizeof *msgs);
    struct iovec *iov = PyMem_RawCalloc(BATCH, sizeof *iov);
    uint8_t *bufs = PyMem_RawMalloc((size_t)BATCH * (size_t)max_bytes);
    /* cmsg buffers must be aligned for struct cmsghdr */
    struct cmsghdr *ctrl = PyMem_RawMalloc((size_t)BATCH * CTRL_BYTES);
    PyObject *result = NULL;
    if (!seq_o || !kern_o || !hw_o || !user_o || !size_o || (keep_bytes && !pay_o)) {
        goto done; /* exception set by new_array */
    }
    if (!msgs || !iov || !bufs || !ctrl) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t *seqs = (uint32_t *)PyByteArray_AS_STRING(seq_o);
    int64_t *kern = (int64_t *)PyByteArray_AS_STRING(kern_o);
    int64_t *hwts = (int64_t *)PyByteArray_AS_STRING(hw_o);
    int64_t *user = (int64_t *)PyByteArray_AS_STRING(user_o);
    int32_t *sizes = (int32_t *)PyByteArray_AS_STRING(size_o);
    uint8_t *pay = pay_o ? (uint8_t *)PyByteArray_AS_STRING(pay_o) : NULL;

    Py_ssize_t n = 0, foreign = 0, truncated = 0;
    int reason = STOP_COUNT, fatal = 0;
    gil_t g;
    loop_begin(&g, check);
    int64_t deadline = mono_ns() + first_timeout;
    int64_t next_stop_check = 0;
    while (n < max_packets) {
        int64_t now = mono_ns();
        if (now >= deadline) {
            reason = STOP_IDLE;
            break;
        }
        if (now >= g.slice_end) {
            if (gil_checkpoint(&g) < 0)
                goto interrupted;
            now = mono_ns();
        }
        if (busy) {
            /* spinning: the stop pipe is looked at every STOP_CHECK_NS, not per try */
            if (stop_requested(&g, stop_fd, now, &next_stop_check)) {
                reason = STOP_FD;
                break;
            }
        }
        else {
            int64_t until = deadline < g.slice_end ? deadline : g.slice_end;
            int w = wait_readable(&g, fd, stop_fd, until, now);
            if (w == WAIT_ERROR) {
                fatal = errno;
                break;
            }
            if (w == WAIT_STOP) {
                reason = STOP_FD;
                break;
            }
            if (w == WAIT_AGAIN)
                continue;
        }
        for (int d = 0; d < DRAIN_BATCHES && n < max_packets; d++) {
            unsigned int want = (unsigned int)(max_packets - n < BATCH ? max_packets - n : BATCH);
            for (unsigned int j = 0; j < want; j++) {
                iov[j].iov_base = bufs + (size_t)j * (size_t)max_bytes;
                iov[j].iov_len = (size_t)max_bytes;
                memset(&msgs[j].msg_hdr, 0, sizeof msgs[j].msg_hdr);
                msgs[j].msg_hdr.msg_iov = &iov[j];
                msgs[j].msg_hdr.msg_iovlen = 1;
                msgs[j].msg_hdr.msg_control = (uint8_t *)ctrl + (size_t)j * CTRL_BYTES;
                msgs[j].msg_hdr.msg_controllen = CTRL_BYTES;
            }
            int r = recvmmsg(fd, msgs, want, MSG_DONTWAIT | MSG_TRUNC, NULL);
            if (r < 0) {
                if (errno == EINTR)
                    g.slice_end = g.check ? 0 : INT64_MAX;
                else if (!is_eagain(errno) && !transient_send_error(errno))
                    fatal = errno; /* pending ICMP errors etc. are ignored */
                else if (busy && d == 0)
                    cpu_relax();
                break;
            }
            int64_t tu = mono_ns();
            int accepted = 0;
            for (int j = 0; j < r; j++) {
                const uint8_t *p = iov[j].iov_base;
                size_t len = msgs[j].msg_len; /* true length (MSG_TRUNC) */
                size_t have = len < (size_t)max_bytes ? len : (size_t)max_bytes;
                uint16_t kind;
                uint32_t seq;
                if (!get_header(p, have, test_id, &kind, &seq)) {
                    foreign++;
                    continue;
                }
                if (msgs[j].msg_hdr.msg_flags & MSG_TRUNC)
                    truncated++;
                seqs[n] = seq;
                sizes[n] = (int32_t)(len > INT32_MAX ? INT32_MAX : len);
                user[n] = tu;
                parse_timestamps(&msgs[j].msg_hdr, &kern[n], &hwts[n], &ovfl);
                if (pay) {
                    uint8_t *dst = pay + (size_t)n * (size_t)keep_bytes;
                    size_t c = have < (size_t)keep_bytes ? have : (size_t)keep_bytes;
                    memcpy(dst, p, c);
                    memset(dst + c, 0, (size_t)keep_bytes - c);
                }
                n++;
                accepted = 1;
            }
            if (accepted)
                deadline = tu + idle_timeout;
            if ((unsigned int)r < want)
                break;
        }
        if (fatal)
            break;
    }
    loop_end(&g);
    if (fatal) {
        set_errno_error(fatal);
        goto done;
    }
    long long drops = socket_drops(fd);
    if (PyByteArray_Resize(seq_o, n * 4) < 0 || PyByteArray_Resize(kern_o, n * 8) < 0 ||
        PyByteArray_Resize(hw_o, n * 8) < 0 || PyByteArray_Resize(user_o, n * 8) < 0 ||
        PyByteArray_Resize(size_o, n * 4) < 0 ||
        (pay_o && PyByteArray_Resize(pay_o, n * keep_bytes) < 0))
        goto done;
    result = Py_BuildValue("OOOOOOnnnLiL", seq_o, kern_o, hw_o, user_o, size_o,
                           pay_o ? pay_o : Py_None, n, foreign, truncated, drops, reason, ovfl);
    goto done;

interrupted:
    loop_end(&g);
done:
    Py_XDECREF(seq_o);
    Py_XDECREF(kern_o);
    Py_XDECREF(hw_o);
    Py_XDECREF(user_o);
    Py_XDECREF(size_o);
    Py_XDECREF(pay_o);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    PyMem_RawFree(bufs);
    PyMem_RawFree(ctrl);
    return result;
}

/* ------------------------------------------------------------------ */
/* request_response                                                    */

PyDoc_STRVAR(request_response_doc,
"request_response(fd, count, request_bytes, response_bytes, test_id, busy_poll,\n"
"                 timeout_ns, gap_ns, seed, check_signals)\n"
"-> (rtt i64, size i32, timeouts, stale, foreign, errors, last_errno, sent i64)\n\n"
"For i in range(count): REQUEST seq=i (u32 response_bytes after the header,\n"
"random fill, built before the clock starts); t1 = CLOCK_MONOTONIC right\n"
"before send(); t2 = right after the recv() that returns the RESPONSE with\n"
"seq i and test_id; rtt = t2 - t1, -1 on timeout or error; sent = t1 (-1 for\n"
"requests never sent: an interrupted run). Responses of this\n"
"test with another seq are stale, anything else foreign; both are skipped.\n"
"Request i+1 is sent gap_ns after request i ended (response, timeout or\n"
"error). busy_poll spins on recv(MSG_DONTWAIT); otherwise ppoll() sleeps.");

static PyObject *
request_response(PyObject *self, PyObject *args)
{
    int fd, busy;
    Py_ssize_t count, request_bytes;
    unsigned int response_bytes, test_id;
    long long timeout, gap;
    unsigned long long seed;
    int check;
    if (!PyArg_ParseTuple(args, "innIIpLLKp", &fd, &count, &request_bytes, &response_bytes,
                          &test_id, &busy, &timeout, &gap, &seed, &check))
        return NULL;
    if (count < 0 || request_bytes < REQ_BYTES || request_bytes > MAX_UDP || timeout < 0 ||
        gap < 0) {
        PyErr_SetString(PyExc_ValueError, "request_response: argument out of range");
        return NULL;
    }
    PyObject *rtt_o = new_array(count, 8), *size_o = new_array(count, 4), *sent_o = new_array(count, 8),
             *result = NULL;
    uint8_t *sbuf = PyMem_RawMalloc((size_t)request_bytes);
    uint8_t *rbuf = PyMem_RawMalloc(MAX_DGRAM + 1);
    if (!rtt_o || !size_o || !sent_o)
        goto done;
    if (!sbuf || !rbuf) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *rtt = (int64_t *)PyByteArray_AS_STRING(rtt_o);
    int32_t *sizes = (int32_t *)PyByteArray_AS_STRING(size_o);
    int64_t *sent = (int64_t *)PyByteArray_AS_STRING(sent_o);
    Py_ssize_t timeouts = 0, stale = 0, foreign = 0, errors = 0;
    int last_errno = 0, fatal = 0;
    struct timeval saved_tv, tv = ns_to_tv(timeout < STOP_CHECK_NS ? timeout : STOP_CHECK_NS);
    socklen_t tv_len = sizeof saved_tv;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, &tv_len) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
        set_errno_error(errno);
        goto done;
    }
    gil_t g;
    loop_begin(&g, check);
    int64_t next_send = mono_ns();
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t seq = (uint32_t)i;
        put_header(sbuf, KIND_REQUEST, seq, test_id);
        put_u32(sbuf + HDR_BYTES, response_bytes);
        fill_random(sbuf + REQ_BYTES, (size_t)request_bytes - REQ_BYTES, seed, test_id, seq);
        rtt[i] = -1;
        sizes[i] = -1;
        sent[i] = -1;
        int64_t t1;
        if (wait_until(&g, next_send, &t1) < 0)
            goto interrupted;
        sent[i] = t1;
        ssize_t r;
        while ((r = send(fd, sbuf, (size_t)request_bytes, 0)) < 0 && errno == EINTR)
            g.slice_end = g.check ? 0 : INT64_MAX;
        if (r < 0) {
            if (!transient_send_error(errno)) {
                fatal = errno;
                break;
            }
            last_errno = errno;
            errors++;
        }
        else {
            int64_t deadline = t1 + timeout;
            for (;;) {
                /* blocking mode waits in recv() itself, like the simplest client: one
                 * system call for the response, no ppoll() wake-up before it */
                r = recv(fd, rbuf, MAX_DGRAM + 1, busy ? MSG_DONTWAIT : 0);
                if (r >= 0) {
                    int64_t t2 = mono_ns();
                    uint16_t kind;
                    uint32_t rseq;
                    if (get_header(rbuf, (size_t)r, test_id, &kind, &rseq) &&
                        kind == KIND_RESPONSE && rseq == seq) {
                        rtt[i] = t2 - t1;
                        sizes[i] = (int32_t)r;
                        break;
                    }
                    if (get_header(rbuf, (size_t)r, test_id, &kind, &rseq) &&
                        kind == KIND_RESPONSE)
                        stale++;
                    else
                        foreign++;
                    if (t2 >= deadline) { /* a flood must not outlast the timeout */
                        timeouts++;
                        break;
                    }
                    continue;
                }
                int e = errno;
                if (e == EINTR) {
                    g.slice_end = g.check ? 0 : INT64_MAX;
                    continue;
                }
                if (!is_eagain(e)) {
                    if (!transient_send_error(e)) { /* ECONNREFUSED: nobody listens */
                        fatal = e;
                        break;
                    }
                    last_errno = e;
                    errors++;
                    break;
                }
                int64_t now = mono_ns();
                if (now >= deadline) {
                    timeouts++;
                    break;
                }
                /* only a long wait (the RTT is lost already) or a signal
                 * (slice_end = 0) is worth a GIL round trip */
                if (now >= g.slice_end && (now - t1 > SLICE_NS || g.slice_end == 0)) {
                    if (gil_checkpoint(&g) < 0)
                        goto interrupted;
                    continue;
                }
                if (busy)
                    cpu_relax();
                /* blocking mode: the recv() above blocked up to the socket's receive
                 * timeout (STOP_CHECK_NS at most); come round to check the deadline */
            }
            if (fatal)
                break;
        }
        int64_t end = mono_ns();
        next_send = end + gap;
        if (end >= g.slice_end && gil_checkpoint(&g) < 0)
            goto interrupted;
    }
    loop_end(&g);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, sizeof saved_tv);
    if (fatal) {
        set_errno_error(fatal);
        goto done;
    }
    result = Py_BuildValue("OOnnnniO", rtt_o, size_o, timeouts, stale, foreign, errors,
                           last_errno, sent_o);
    goto done;

interrupted:
    loop_end(&g);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, sizeof saved_tv);
done:
    Py_XDECREF(rtt_o);
    Py_XDECREF(size_o);
    Py_XDECREF(sent_o);
    PyMem_RawFree(sbuf);
    PyMem_RawFree(rbuf);
    return result;
}

/* ------------------------------------------------------------------ */
/* respond                                                             */

/* 1 when the source address of a datagram is the allowed peer: same family
 * and address, and same port unless *port is 0 (not learned yet). */
static int
peer_matches(const struct sockaddr_storage *src, socklen_t srclen, int family,
             const uint8_t *addr, uint16_t port)
{
    if (family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)src;
        if (srclen < sizeof *s || s->sin_family != AF_INET ||
            memcmp(&s->sin_addr, addr, 4) != 0)
            return 0;
        return port == 0 || ntohs(s->sin_port) == port;
    }
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)src;
    if (srclen < sizeof *s || s->sin6_family != AF_INET6 || memcmp(&s->sin6_addr, addr, 16) != 0)
        return 0;
    return port == 0 || ntohs(s->sin6_port) == port;
}

static uint16_t
src_port(const struct sockaddr_storage *src)
{
    if (src->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)src)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)src)->sin6_port);
}

PyDoc_STRVAR(respond_doc,
"respond(fd, test_id, stop_fd, max_response_bytes, family, peer_addr, peer_port,\n"
"        rate_pps, burst, first_timeout_ns, idle_timeout_ns, max_duration_ns, seed,\n"
"        check_signals, busy_poll)\n"
"-> (answered, refused_peer, refused_invalid, refused_rate, send_errors,\n"
"    peer_port, stop_reason)\n\n"
"Answers each REQUEST of test_id from the peer (peer_addr: 4 or 16 bytes;\n"
"peer_port 0: learned from the first valid request from that address) with a\n"
"RESPONSE of min(requested, max_response_bytes) bytes (at least 16), same seq,\n"
"sent back to the request's source. Datagrams from anyone else are refused\n"
"(refused_peer), invalid ones (short, magic, test_id, kind) refused_invalid,\n"
"those over the token bucket (rate_pps, burst) refused_rate. Stops on stop_fd\n"
"(2), no valid request for first_timeout_ns / idle_timeout_ns (1), or after\n"
"max_duration_ns when >= 0 (3). busy_poll: recvmmsg(MSG_DONTWAIT) in a spin\n"
"(one CPU at 100 %%) instead of a blocking receive, so no wake-up is in the\n"
"round trip.");

static PyObject *
respond(PyObject *self, PyObject *args)
{
    int fd, stop_fd, family, peer_port_i;
    unsigned int test_id;
    Py_ssize_t max_resp, addr_len;
    const char *addr;
    double rate, burst;
    long long first_timeout, idle_timeout, max_duration;
    unsigned long long seed;
    int check, busy;
    if (!PyArg_ParseTuple(args, "iIiniy#iddLLLKpp", &fd, &test_id, &stop_fd, &max_resp, &family,
                          &addr, &addr_len, &peer_port_i, &rate, &burst, &first_timeout,
                          &idle_timeout, &max_duration, &seed, &check, &busy))
        return NULL;
    if (max_resp < HDR_BYTES || max_resp > MAX_UDP || !(rate > 0) || !(burst >= 1) ||
        first_timeout < 0 || idle_timeout < 0 || peer_port_i < 0 || peer_port_i > 65535 ||
        !((family == AF_INET && addr_len == 4) || (family == AF_INET6 && addr_len == 16))) {
        PyErr_SetString(PyExc_ValueError, "respond: argument out of range");
        return NULL;
    }
    uint8_t peer_addr[16];
    memcpy(peer_addr, addr, (size_t)addr_len);
    uint16_t peer_port = (uint16_t)peer_port_i;

    struct mmsghdr *msgs = PyMem_RawCalloc(BATCH, sizeof *msgs);
    struct iovec *iov = PyMem_RawCalloc(BATCH, sizeof *iov);
    struct sockaddr_storage *names = PyMem_RawCalloc(BATCH, sizeof *names);
    uint8_t *rbufs = PyMem_RawMalloc((size_t)BATCH * REQ_READ);
    uint8_t *sbuf = PyMem_RawMalloc((size_t)max_resp);
    if (!msgs || !iov || !names || !rbufs || !sbuf) {
        PyMem_RawFree(msgs);
        PyMem_RawFree(iov);
        PyMem_RawFree(names);
        PyMem_RawFree(rbufs);
        PyMem_RawFree(sbuf);
        return PyErr_NoMemory();
    }
    /* random fill once; each response rewrites the header and 8 bytes after
     * it, so responses differ without a 64 KiB regeneration inside the RTT */
    fill_random(sbuf, (size_t)max_resp, seed, test_id, 0xFFFFFFFFu);

    Py_ssize_t answered = 0, refused_peer = 0, refused_invalid = 0, refused_rate = 0,
               send_errors = 0;
    int reason = STOP_IDLE, fatal = 0;
    gil_t g;
    loop_begin(&g, check);
    int64_t start = mono_ns();
    int64_t deadline = start + first_timeout;
    int64_t end = max_duration >= 0 ? start + max_duration : INT64_MAX;
    double tokens = burst;
    int64_t last_refill = start;
    int64_t next_stop_check = start;
    struct timeval saved_tv, tv = ns_to_tv(STOP_CHECK_NS);
    socklen_t tv_len = sizeof saved_tv;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, &tv_len) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
        fatal = errno;
        goto done;
    }
    for (;;) {
        int64_t now = mono_ns();
        if (now >= end) {
            reason = STOP_DURATION;
            break;
        }
        if (now >= deadline) {
            reason = STOP_IDLE;
            break;
        }
        if (now >= g.slice_end) {
            if (gil_checkpoint(&g) < 0)
                goto interrupted;
            now = mono_ns();
        }
        /* The stop pipe is looked at every STOP_CHECK_NS, not per request: a
         * request costs one blocking recvmmsg and one sendto, as in the
         * simplest responder, and no ppoll() wake-up of its own. */
        if (stop_requested(&g, stop_fd, now, &next_stop_check)) {
            reason = STOP_FD;
            break;
        }
        for (int d = 0; d < DRAIN_BATCHES; d++) {
            for (int j = 0; j < BATCH; j++) {
                iov[j].iov_base = rbufs + (size_t)j * REQ_READ;
                iov[j].iov_len = REQ_READ;
                memset(&msgs[j].msg_hdr, 0, sizeof msgs[j].msg_hdr);
                msgs[j].msg_hdr.msg_name = &names[j];
                msgs[j].msg_hdr.msg_namelen = sizeof names[j];
                msgs[j].msg_hdr.msg_iov = &iov[j];
                msgs[j].msg_hdr.msg_iovlen = 1;
            }
            /* The first call blocks (up to the socket's STOP_CHECK_NS receive
             * timeout) for one datagram only: asking for more would make the
             * kernel try again without waiting before it returns, a failed
             * receive inside the round trip. Once that request is answered,
             * the later calls drain whatever queued up meanwhile. */
            int vlen = d == 0 ? 1 : BATCH;
            int r = recvmmsg(fd, msgs, (unsigned int)vlen, d == 0 && !busy ? 0 : MSG_DONTWAIT, NULL);
            if (r < 0) {
                if (errno == EINTR)
                    g.slice_end = g.check ? 0 : INT64_MAX;
                else if (!is_eagain(errno) && !transient_send_error(errno))
                    fatal = errno;
                else if (busy && d == 0)
                    cpu_relax();
                break;
            }
            for (int j = 0; j < r; j++) {
                const uint8_t *p = iov[j].iov_base;
                size_t len = msgs[j].msg_len;
                uint16_t kind;
                uint32_t seq;
                if (!peer_matches(&names[j], msgs[j].msg_hdr.msg_namelen, family, peer_addr,
                                  peer_port)) {
                    refused_peer++;
                    continue;
                }
                if (len < REQ_BYTES || !get_header(p, len, test_id, &kind, &seq) ||
                    kind != KIND_REQUEST) {
                    refused_invalid++;
                    continue;
                }
                if (peer_port == 0)
                    peer_port = src_port(&names[j]);
                int64_t t = mono_ns();
                deadline = t + idle_timeout;
                tokens += (double)(t - last_refill) * rate / 1e9;
                if (tokens > burst)
                    tokens = burst;
                last_refill = t;
                if (tokens < 1.0) {
                    refused_rate++;
                    continue;
                }
                tokens -= 1.0;
                uint32_t want = get_u32(p + HDR_BYTES);
                size_t rsize = want < (uint32_t)max_resp ? want : (size_t)max_resp;
                if (rsize < HDR_BYTES)
                    rsize = HDR_BYTES;
                put_header(sbuf, KIND_RESPONSE, seq, test_id);
                if (rsize >= HDR_BYTES + 8)
                    fill_random(sbuf + HDR_BYTES, 8, seed, test_id, seq);
                ssize_t s;
                while ((s = sendto(fd, sbuf, rsize, 0, (struct sockaddr *)&names[j],
                                   msgs[j].msg_hdr.msg_namelen)) < 0 &&
                       errno == EINTR)
                    g.slice_end = g.check ? 0 : INT64_MAX;
                if (s < 0) {
                    if (!transient_send_error(errno)) {
                        fatal = errno;
                        break;
                    }
                    send_errors++;
                }
                else
                    answered++;
            }
            if (fatal || r < vlen)
                break;
        }
        if (fatal)
            break;
    }
    /* the caller's socket gets its receive timeout back */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, sizeof saved_tv);
done:
    loop_end(&g);
    PyObject *result = NULL;
    if (fatal)
        set_errno_error(fatal);
    else
        result = Py_BuildValue("nnnnnii", answered, refused_peer, refused_invalid, refused_rate,
                               send_errors, (int)peer_port, reason);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    PyMem_RawFree(names);
    PyMem_RawFree(rbufs);
    PyMem_RawFree(sbuf);
    return result;

interrupted:
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &saved_tv, sizeof saved_tv);
    loop_end(&g);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    PyMem_RawFree(names);
    PyMem_RawFree(rbufs);
    PyMem_RawFree(sbuf);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* capture (a packet socket)                                          */

/* One captured frame's record in capture()'s meta array (little-endian,
 * 32 bytes; nicrig.udpmon.wiretap.META_DTYPE reads it). */
typedef struct {
    int64_t sw_ns;    /* kernel software stamp, CLOCK_REALTIME; -1 none */
    int64_t hw_ns;    /* raw hardware stamp, the NIC's clock; -1 none */
    int32_t caplen;   /* octets kept */
    int32_t origlen;  /* the frame's length */
    int32_t ifindex;  /* sll_ifindex */
    uint8_t pkttype;  /* sll_pkttype: 4 = PACKET_OUTGOING */
    uint8_t pad[3];
} frame_meta;

PyDoc_STRVAR(capture_doc,
"capture(fd, snaplen, max_frames, timeout_ns, stop_fd) -> (meta, data, n)\n\n"
"Frames from an AF_PACKET socket whose SO_TIMESTAMPING is set: waits up to\n"
"timeout_ns for one (or for stop_fd to become readable), then reads what is\n"
"queued with recvmmsg (MSG_TRUNC: a frame's true length, its first snaplen\n"
"octets kept) until the queue is empty or max_frames are read. meta: n\n"
"32-byte records (int64 software and hardware stamps, ns, -1 when absent;\n"
"int32 caplen, origlen, ifindex; uint8 packet type); data: the kept octets\n"
"of the n frames, concatenated. The GIL is released meanwhile.");

static PyObject *
capture(PyObject *self, PyObject *args)
{
    int fd, stop_fd;
    Py_ssize_t snaplen, max_frames;
    long long timeout;
    if (!PyArg_ParseTuple(args, "innLi", &fd, &snaplen, &max_frames, &timeout, &stop_fd))
        return NULL;
    if (snaplen < 1 || snaplen > 262144 || max_frames < 1 || max_frames > (1 << 20) || timeout < 0) {
        PyErr_SetString(PyExc_ValueError, "capture: argument out of range");
        return NULL;
    }
    PyObject *meta_o = new_array(max_frames, sizeof(frame_meta));
    PyObject *data_o = new_array(0, 1);
    struct mmsghdr *msgs = PyMem_RawCalloc(BATCH, sizeof *msgs);
    struct iovec *iov = PyMem_RawCalloc(BATCH, sizeof *iov);
    struct sockaddr_ll *addrs = PyMem_RawCalloc(BATCH, sizeof *addrs);
    uint8_t *bufs = PyMem_RawMalloc((size_t)BATCH * (size_t)snaplen);
    struct cmsghdr *ctrl = PyMem_RawMalloc((size_t)BATCH * CTRL_BYTES);
    PyObject *result = NULL;
    if (!meta_o || !data_o)
        goto done;
    if (!msgs || !iov || !addrs || !bufs || !ctrl) {
        PyErr_NoMemory();
        goto done;
    }
    frame_meta *meta = (frame_meta *)PyByteArray_AS_STRING(meta_o);
    Py_ssize_t n = 0;
    int err = 0;
    gil_t g;
    loop_begin(&g, 0);
    int64_t now = mono_ns();
    int w = wait_readable(&g, fd, stop_fd, now + timeout, now);
    if (w == WAIT_ERROR)
        err = errno;
    while (w == WAIT_READY && n < max_frames) {
        int want = max_frames - n < BATCH ? (int)(max_frames - n) : BATCH;
        for (int i = 0; i < want; i++) {
            iov[i].iov_base = bufs + (size_t)i * (size_t)snaplen;
            iov[i].iov_len = (size_t)snaplen;
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &addrs[i];
            msgs[i].msg_hdr.msg_namelen = sizeof addrs[i];
            msgs[i].msg_hdr.msg_control = (char *)ctrl + (size_t)i * CTRL_BYTES;
            msgs[i].msg_hdr.msg_controllen = CTRL_BYTES;
        }
        int got = recvmmsg(fd, msgs, want, MSG_DONTWAIT | MSG_TRUNC, NULL);
        if (got < 0) {
            if (!is_eagain(errno) && errno != EINTR)
                err = errno;
            break;
        }
        /* the data array grows under the GIL: a bytearray is a Python object */
        size_t add = 0;
        for (int i = 0; i < got; i++)
            add += msgs[i].msg_len < (unsigned)snaplen ? msgs[i].msg_len : (size_t)snaplen;
        gil_acquire(&g);
        Py_ssize_t old = PyByteArray_GET_SIZE(data_o);
        if (PyByteArray_Resize(data_o, old + (Py_ssize_t)add) < 0) {
            loop_end(&g);
            goto done;
        }
        uint8_t *data = (uint8_t *)PyByteArray_AS_STRING(data_o) + old;
        for (int i = 0; i < got; i++) {
            frame_meta *m = &meta[n + i];
            long long ovfl = 0;
            parse_timestamps(&msgs[i].msg_hdr, &m->sw_ns, &m->hw_ns, &ovfl);
            m->origlen = (int32_t)msgs[i].msg_len;
            m->caplen = msgs[i].msg_len < (unsigned)snaplen ? (int32_t)msgs[i].msg_len : (int32_t)snaplen;
            m->ifindex = addrs[i].sll_ifindex;
            m->pkttype = addrs[i].sll_pkttype;
            memset(m->pad, 0, sizeof m->pad);
            memcpy(data, iov[i].iov_base, (size_t)m->caplen);
            data += m->caplen;
        }
        gil_release(&g);
        n += got;
        if (got < want)
            break;
    }
    loop_end(&g);
    if (err) {
        set_errno_error(err);
        goto done;
    }
    if (PyByteArray_Resize(meta_o, n * (Py_ssize_t)sizeof(frame_meta)) < 0)
        goto done;
    result = Py_BuildValue("OOn", meta_o, data_o, n);
done:
    Py_XDECREF(meta_o);
    Py_XDECREF(data_o);
    PyMem_RawFree(msgs);
    PyMem_RawFree(iov);
    PyMem_RawFree(addrs);
    PyMem_RawFree(bufs);
    PyMem_RawFree(ctrl);
    return result;
}

/* ------------------------------------------------------------------ */
/* clocks                                                              */

PyDoc_STRVAR(clock_offset_doc,
"clock_offset() -> (offset_ns, uncertainty_ns)\n\n"
"CLOCK_REALTIME - CLOCK_MONOTONIC from the tightest of 16 bracketed reads;\n"
"uncertainty is half that bracket.");

static PyObject *
clock_offset(PyObject *self, PyObject *unused)
{
    int64_t best = INT64_MAX, offset = 0;
    for (int k = 0; k < 16; k++) {
        int64_t m1 = mono_ns(), r = clock_ns(CLOCK_REALTIME), m2 = mono_ns();
        if (m2 - m1 < best) {
            best = m2 - m1;
            offset = r - (m1 + (m2 - m1) / 2);
        }
    }
    return Py_BuildValue("LL", (long long)offset, (long long)(best / 2));
}

static PyMethodDef methods[] = {
    {"send_paced", send_paced, METH_VARARGS, send_paced_doc},
    {"receive", receive, METH_VARARGS, receive_doc},
    {"request_response", request_response, METH_VARARGS, request_response_doc},
    {"respond", respond, METH_VARARGS, respond_doc},
    {"set_timestamping", py_set_timestamping, METH_VARARGS, set_timestamping_doc},
    {"clock_offset", clock_offset, METH_NOARGS, clock_offset_doc},
    {"capture", capture, METH_VARARGS, capture_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "nicrig.udpmon._engine",
    "udpmon's hot loops in C; use nicrig.udpmon.engine, not this module.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__engine(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddIntConstant(m, "BATCH", BATCH) < 0 ||
        PyModule_AddIntConstant(m, "SLICE_NS", (long)SLICE_NS) < 0 ||
        PyModule_AddIntConstant(m, "SPIN_NS", (long)SPIN_NS) < 0 ||
        PyModule_AddIntConstant(m, "WAKE_EARLY_NS", (long)WAKE_EARLY_NS) < 0 ||
        PyModule_AddIntConstant(m, "LEAD_NS", (long)LEAD_NS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DGRAM", MAX_DGRAM) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
