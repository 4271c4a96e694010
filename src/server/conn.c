/*
 * conn.c - which connections the server keeps: admission when one is
 * accepted, each client address's share, deadlines for a request's head and
 * body, and a rate-limited log line when a limit bites.
 *
 * libmicrohttpd gives each connection a thread and, left to itself, keeps
 * every connection: a client that sends half a request head and nothing more
 * holds its slot forever. Its own MHD_OPTION_CONNECTION_TIMEOUT does not
 * help: it measures inactivity, so a byte every few seconds resets it, and it
 * also cuts a streamed reply whose callback blocks longer than it (a long
 * prefill). Past its connection limit it closes new connections unanswered.
 * So http.c tells the table here what each connection is doing:
 *
 *   WAIT    accepted, or its previous reply sent: no whole request head yet
 *           (an idle kept-alive connection is in WAIT too)
 *   BODY    head read, body being received
 *   ACTIVE  body read: the handler or its stream runs, as long as it takes
 *
 * Deadlines: WAIT and BODY may each last timeout_s; a watchdog thread
 * (every 0.25 s) shuts an overdue connection's socket down (shutdown(2):
 * the connection's own thread reads end-of-stream and closes it).
 *
 * Admission (rp_conn_open, on the gate's accepting thread, gate.c): a new
 * connection that would put its client address past max_per_client, or the
 * server past max_conn, first makes room by closing the oldest WAIT
 * connection of that address (at the global limit: of the address holding
 * the most WAIT connections). Slow and idle clients give way to new ones, so
 * one address's connections can keep neither another address out nor a
 * fresh request of its own. With nothing to close (every slot of the address,
 * or of the server, busy with a request), the connection is refused: it is
 * not counted, and http.c answers its request 503 with Retry-After and closes
 * it. An address keeps at most REFUSED_PENDING refused connections not yet
 * answered (older ones are closed); the hard limit sits above max_conn by a
 * margin for them (rp_conn_full): past it the gate closes a new connection
 * at once (counted: rp_conn_hard_limit).
 *
 * Client address: an IPv4 address, or an IPv6 address's /64 (one host
 * usually has a whole /64); IPv4-mapped IPv6 addresses count as IPv4.
 *
 * Hand-over: the gate records a connection when it accepts it and hands the
 * socket to libmicrohttpd once its first request line is good; libmicrohttpd
 * takes it later on its own thread (rp_conn_adopt, by descriptor) or, past its
 * own limits, closes it without a word. Until adopted the record holds a
 * duplicate descriptor: shutting the socket down goes through it (it cannot
 * have been reused), and a record never adopted is dropped after
 * HANDOFF_EXPIRE_S with its duplicate. A second hand-over of the same
 * descriptor number proves the first stale (the number was free again).
 *
 * Threads: every function takes the table's mutex. libmicrohttpd reports a
 * closed connection (rp_conn_close) before it closes the socket, and a
 * record is freed only there, so the watchdog never shuts a reused
 * descriptor down.
 */
#include "server_int.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TICK_S 0.25           // watchdog period
#define REPORT_EVERY_S 10.0   // at most one log line per this many seconds
#define HANDOFF_EXPIRE_S 10.0 // a record handed to libmicrohttpd and never adopted is dropped after this
#define REFUSED_PENDING 2     // refused connections an address may keep unanswered (head or body on the way)

typedef enum phase { PH_WAIT = 0, PH_BODY = 1, PH_ACTIVE = 2 } phase;

// One client address and what its connections hold.
typedef struct conn_addr {
    struct conn_addr *next;
    unsigned char key[8]; // IPv4 address (4 bytes) or IPv6 /64 (8 bytes)
    int key_len;
    int n_conns;   // records (any state)
    int n_live;    // counted against the limits
    int n_wait;    // counted, in WAIT, not shut down: the ones that can make room
    int n_refused; // refused, in WAIT or BODY (not yet answered), not shut down
} conn_addr;

struct rp_conn {
    rp_conn *prev, *next;
    conn_addr *addr;
    int fd;
    phase ph;
    double since;      // when the phase began
    bool counted;      // counts against the limits (not refused, not shut down)
    bool refused;      // over the limits with nothing to close: answered 503
    bool served;       // has had a request before this wait
    bool head_started; // the request line of the next request has arrived
    bool handed;       // handed to libmicrohttpd by the gate, not yet adopted
    double handed_at;
    int hold_fd;       // while handed: a duplicate of fd that keeps the socket for shutdown(2) (-1: none)
    rp_conn_end ended; // RP_CONN_OPEN, or why the table shut it down
    char text[INET6_ADDRSTRLEN];
};

typedef struct report {
    uint64_t evicted, refused, head_timeouts, body_timeouts, hard_refused;
    char last_addr[INET6_ADDRSTRLEN]; // the address of the last eviction or refusal
} report;

struct rp_conn_table {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t watchdog;
    bool watchdog_started, stop;
    int max_conn, max_per_client;
    double timeout_s;
    rp_conn *head;
    conn_addr *addrs;
    int n_live, n_open;
    int n_shut; // records shut down by the table, their sockets not closed yet
    rp_conn_stats totals;
    report pending; // since the last log line
    double last_report;
};

/* ---- addresses ---------------------------------------------------------------- */

static void addr_key(const struct sockaddr *sa, unsigned char key[8], int *len, char *text)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    *len = 0;
    snprintf(text, INET6_ADDRSTRLEN, "?");
    if (!sa)
        return;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        memcpy(key, &a->sin_addr, 4);
        *len = 4;
        inet_ntop(AF_INET, &a->sin_addr, text, INET6_ADDRSTRLEN);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        const unsigned char *b = a->sin6_addr.s6_addr;
        if (memcmp(b, mapped, 12) == 0) {
            memcpy(key, b + 12, 4);
            *len = 4;
            inet_ntop(AF_INET, b + 12, text, INET6_ADDRSTRLEN);
        } else {
            memcpy(key, b, 8);
            *len = 8;
            inet_ntop(AF_INET6, b, text, INET6_ADDRSTRLEN);
        }
    }
}

static conn_addr *addr_get(rp_conn_table *t, const unsigned char *key, int len)
{
    for (conn_addr *a = t->addrs; a; a = a->next)
        if (a->key_len == len && memcmp(a->key, key, (size_t)len) == 0)
            return a;
    conn_addr *a = rp_calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    memcpy(a->key, key, (size_t)len);
    a->key_len = len;
    a->next = t->addrs;
    t->addrs = a;
    return a;
}

static void addr_put(rp_conn_table *t, conn_addr *a)
{
    if (--a->n_conns > 0)
        return;
    for (conn_addr **p = &t->addrs; *p; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    rp_free(a);
}

/* ---- state ------------------------------------------------------------------ */

// Adjusts the address's counts of connections that may be closed to make room, for c
// entering (+1) or leaving (-1) them: counted ones waiting for a head, refused ones not
// yet answered.
static void wait_count(rp_conn *c, int d)
{
    if (c->ended != RP_CONN_OPEN)
        return;
    if (c->counted && c->ph == PH_WAIT)
        c->addr->n_wait += d;
    else if (c->refused && c->ph != PH_ACTIVE)
        c->addr->n_refused += d;
}

static void set_phase(rp_conn *c, phase ph)
{
    wait_count(c, -1);
    c->ph = ph;
    c->since = rp_time_s();
    wait_count(c, +1);
}

static void uncount(rp_conn_table *t, rp_conn *c)
{
    if (!c->counted)
        return;
    c->counted = false;
    c->addr->n_live--;
    t->n_live--;
}

// Shuts c's socket down for `why`; its thread then sees end-of-stream and closes it.
static void shut(rp_conn_table *t, rp_conn *c, rp_conn_end why)
{
    wait_count(c, -1);
    uncount(t, c);
    c->ended = why;
    t->n_shut++;
    shutdown(c->handed ? c->hold_fd : c->fd, SHUT_RDWR);
}

// The oldest connection of a that may be closed to make room: a counted one waiting for
// a head, or (refused) a refused one not answered yet. NULL if none.
static rp_conn *oldest_wait(rp_conn_table *t, const conn_addr *a, bool refused)
{
    rp_conn *best = NULL;
    for (rp_conn *c = t->head; c; c = c->next) {
        if (c->addr != a || c->ended != RP_CONN_OPEN)
            continue;
        bool ok = refused ? c->refused && c->ph != PH_ACTIVE : c->counted && c->ph == PH_WAIT;
        if (ok && (!best || c->since < best->since))
            best = c;
    }
    return best;
}

static void note_event(rp_conn_table *t, uint64_t *pending, uint64_t *total, const char *addr)
{
    (*pending)++;
    (*total)++;
    if (addr)
        snprintf(t->pending.last_addr, sizeof(t->pending.last_addr), "%s", addr);
}

// Removes c from the table and frees it (the table's lock held).
static void unlink_free(rp_conn_table *t, rp_conn *c)
{
    wait_count(c, -1);
    uncount(t, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    t->n_open--;
    if (c->ended != RP_CONN_OPEN)
        t->n_shut--;
    addr_put(t, c->addr);
    if (c->hold_fd >= 0)
        close(c->hold_fd);
    rp_free(c);
}

/* ---- the watchdog ----------------------------------------------------------- */

static void report_now(rp_conn_table *t, double now)
{
    report *p = &t->pending;
    if (!p->evicted && !p->refused && !p->head_timeouts && !p->body_timeouts && !p->hard_refused)
        return;
    if (t->last_report > 0 && now - t->last_report < REPORT_EVERY_S)
        return;
    char line[768];
    int n = snprintf(line, sizeof(line),
                     "rapid: connection limits (%d connections, %d per client address, %g s "
                     "to send a request head or body) bit:",
                     t->max_conn, t->max_per_client, t->timeout_s);
    const char *sep = "";
#define PART(v, ...)                                                                                                   \
    if ((v) && n > 0 && (size_t)n < sizeof(line)) {                                                                    \
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%s ", sep);                                                 \
        n += snprintf(line + n, sizeof(line) - (size_t)n, __VA_ARGS__);                                                \
        sep = ",";                                                                                                     \
    }
    PART(p->evicted, "%llu idle or unfinished connections closed to make room", (unsigned long long)p->evicted)
    PART(p->refused, "%llu answered 503 (every slot busy)", (unsigned long long)p->refused)
    PART(p->head_timeouts, "%llu closed without a whole request head", (unsigned long long)p->head_timeouts)
    PART(p->body_timeouts, "%llu closed without the whole body", (unsigned long long)p->body_timeouts)
    PART(p->hard_refused, "%llu closed at once (past every margin)", (unsigned long long)p->hard_refused)
#undef PART
    if (p->last_addr[0] && n > 0 && (size_t)n < sizeof(line))
        snprintf(line + n, sizeof(line) - (size_t)n, "; the last from %s", p->last_addr);
    rp_log(RP_LOG_WARN, "%s", line);
    memset(p, 0, sizeof(*p));
    t->last_report = now;
}

static void *watchdog_main(void *arg)
{
    rp_conn_table *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(TICK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->wake, &t->lock, &ts);
        if (t->stop)
            break;
        double now = rp_time_s();
        for (rp_conn *c = t->head, *next; c; c = next) {
            next = c->next;
            if (c->handed && now - c->handed_at > HANDOFF_EXPIRE_S) {
                // libmicrohttpd closes a connection it cannot take without a word: never
                // adopted, the record goes (and its duplicate, which closes the socket).
                unlink_free(t, c);
                continue;
            }
            if (c->ended != RP_CONN_OPEN || c->ph == PH_ACTIVE || now - c->since <= t->timeout_s)
                continue;
            if (c->ph == PH_BODY) {
                note_event(t, &t->pending.body_timeouts, &t->totals.body_timeouts, NULL);
                shut(t, c, RP_CONN_BODY_TIMEOUT);
            } else if (c->served && !c->head_started) {
                t->totals.idle_timeouts++; // the normal end of a kept-alive connection: not reported
                shut(t, c, RP_CONN_IDLE_TIMEOUT);
            } else {
                note_event(t, &t->pending.head_timeouts, &t->totals.head_timeouts, NULL);
                shut(t, c, RP_CONN_HEAD_TIMEOUT);
            }
        }
        report_now(t, now);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---- the table ---------------------------------------------------------------- */

rp_status rp_conn_table_create(int max_conn, int max_per_client, double timeout_s, rp_conn_table **out)
{
    *out = NULL;
    if (max_conn < 1 || max_per_client < 1 || !(timeout_s > 0))
        return RP_ERR(RP_ERR_INVALID, "connection limits must be positive (got %d connections, %d per client, %g s)",
                      max_conn, max_per_client, timeout_s);
    rp_conn_table *t = rp_calloc(1, sizeof(*t));
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    t->max_conn = max_conn;
    t->max_per_client = max_per_client < max_conn ? max_per_client : max_conn;
    t->timeout_s = timeout_s;
    t->totals.limit = t->max_conn;
    t->totals.per_client = t->max_per_client;
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&t->watchdog, NULL, watchdog_main, t);
    if (rc) {
        rp_conn_table_destroy(t);
        return RP_ERR(RP_ERR_NOMEM, "cannot start the connection watchdog: %s", strerror(rc));
    }
    t->watchdog_started = true;
    *out = t;
    return RP_OK;
}

void rp_conn_table_destroy(rp_conn_table *t)
{
    if (!t)
        return;
    if (t->watchdog_started) {
        pthread_mutex_lock(&t->lock);
        t->stop = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->watchdog, NULL);
    }
    while (t->head) {
        rp_conn *c = t->head;
        t->head = c->next;
        if (c->hold_fd >= 0)
            close(c->hold_fd);
        rp_free(c);
    }
    while (t->addrs) {
        conn_addr *a = t->addrs;
        t->addrs = a->next;
        rp_free(a);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    rp_free(t);
}

int rp_conn_margin(int max_conn)
{
    int m = max_conn / 8;
    return m < 16 ? 16 : m;
}

rp_conn *rp_conn_open(rp_conn_table *t, int fd, const struct sockaddr *sa)
{
    rp_conn *c = rp_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    unsigned char key[8];
    int len;
    addr_key(sa, key, &len, c->text);
    pthread_mutex_lock(&t->lock);
    conn_addr *a = addr_get(t, key, len);
    if (!a) {
        pthread_mutex_unlock(&t->lock);
        rp_free(c);
        return NULL;
    }
    a->n_conns++;
    c->addr = a;
    c->fd = fd;
    c->hold_fd = -1;
    c->ph = PH_WAIT;
    c->since = rp_time_s();
    c->next = t->head;
    if (t->head)
        t->head->prev = c;
    t->head = c;
    t->n_open++;

    // Make room: the address's own oldest waiting connection past its share, else at the
    // global limit the oldest waiting one of the address that holds the most.
    rp_conn *victim = NULL;
    bool need = false;
    if (a->n_live >= t->max_per_client) {
        need = true;
        victim = oldest_wait(t, a, false);
    } else if (t->n_live >= t->max_conn) {
        need = true;
        conn_addr *most = NULL;
        for (conn_addr *x = t->addrs; x; x = x->next)
            if (x->n_wait > 0 && (!most || x->n_wait > most->n_wait))
                most = x;
        if (most)
            victim = oldest_wait(t, most, false);
    }
    if (victim) {
        note_event(t, &t->pending.evicted, &t->totals.evicted, victim->text);
        shut(t, victim, RP_CONN_EVICTED);
    }
    if (need && !victim) {
        c->refused = true;
        if (a->n_refused >= REFUSED_PENDING) {
            rp_conn *old = oldest_wait(t, a, true);
            if (old) {
                t->totals.evicted++;
                shut(t, old, RP_CONN_EVICTED);
            }
        }
    } else {
        c->counted = true;
        a->n_live++;
        t->n_live++;
    }
    wait_count(c, +1);
    pthread_mutex_unlock(&t->lock);
    return c;
}

void rp_conn_close(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->lock);
    unlink_free(t, c);
    pthread_mutex_unlock(&t->lock);
}

void rp_conn_handoff(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->lock);
    // Another record handed with this descriptor is stale: its socket was closed (the
    // descriptor is reused), so libmicrohttpd never took it.
    for (rp_conn *o = t->head, *next; o; o = next) {
        next = o->next;
        if (o != c && o->handed && o->fd == c->fd)
            unlink_free(t, o);
    }
    c->handed = true;
    c->handed_at = rp_time_s();
    c->hold_fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0); // -1 (no descriptors left): shut down nothing
    pthread_mutex_unlock(&t->lock);
}

rp_conn *rp_conn_adopt(rp_conn_table *t, int fd)
{
    pthread_mutex_lock(&t->lock);
    rp_conn *c = t->head;
    while (c && !(c->handed && c->fd == fd))
        c = c->next;
    if (c) {
        c->handed = false;
        if (c->hold_fd >= 0)
            close(c->hold_fd);
        c->hold_fd = -1;
    }
    pthread_mutex_unlock(&t->lock);
    return c;
}

void rp_conn_head_started(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->lock);
    c->head_started = true;
    pthread_mutex_unlock(&t->lock);
}

bool rp_conn_request(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return false;
    pthread_mutex_lock(&t->lock);
    set_phase(c, PH_BODY);
    bool refused = c->refused;
    if (refused)
        note_event(t, &t->pending.refused, &t->totals.refused, c->text);
    pthread_mutex_unlock(&t->lock);
    return refused;
}

void rp_conn_body_done(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->lock);
    set_phase(c, PH_ACTIVE);
    pthread_mutex_unlock(&t->lock);
}

void rp_conn_request_done(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->lock);
    set_phase(c, PH_WAIT);
    c->served = true;
    c->head_started = false;
    pthread_mutex_unlock(&t->lock);
}

rp_conn_end rp_conn_ended(rp_conn_table *t, rp_conn *c)
{
    if (!c)
        return RP_CONN_OPEN;
    pthread_mutex_lock(&t->lock);
    rp_conn_end e = c->ended;
    pthread_mutex_unlock(&t->lock);
    return e;
}

bool rp_conn_full(rp_conn_table *t)
{
    pthread_mutex_lock(&t->lock);
    // Connections the table shut down are on their way out (their threads close them):
    // counting them would turn slow clients giving way into everyone being refused.
    bool full = t->n_open - t->n_shut >= t->max_conn + rp_conn_margin(t->max_conn);
    pthread_mutex_unlock(&t->lock);
    return full;
}

void rp_conn_hard_limit(rp_conn_table *t)
{
    pthread_mutex_lock(&t->lock);
    note_event(t, &t->pending.hard_refused, &t->totals.hard_refused, NULL);
    pthread_mutex_unlock(&t->lock);
}

void rp_conn_get_stats(rp_conn_table *t, rp_conn_stats *out)
{
    pthread_mutex_lock(&t->lock);
    *out = t->totals;
    out->open = t->n_open;
    pthread_mutex_unlock(&t->lock);
}
