/*
 * pull.c - downloads a model into the hub cache with the hub's own protocol, so the
 * result is what huggingface_hub would have written (and it reads ours):
 *   1. GET {endpoint}/api/models/REPO/revision/REV?blobs=true: the commit ("sha") and the
 *      files ("siblings": rfilename, size, blobId, lfs.sha256);
 *   2. rp_hub_select_files chooses the files the model needs;
 *   3. each file not yet in blobs/: under a lock (.locks/models--ORG--NAME/ETAG.lock,
 *      flock, as huggingface_hub's filelock), GET {endpoint}/REPO/resolve/COMMIT/FILE,
 *      following redirects (the hub sends LFS files to a CDN), appended to
 *      blobs/ETAG.incomplete and resumed with Range after a cut; the LFS sha256 and the
 *      size are checked before the file is renamed to blobs/ETAG (a mismatch deletes the
 *      partial file: nothing is placed); then snapshots/COMMIT/FILE -> ../../blobs/ETAG;
 *   4. refs/REV gets the commit (atomically), and the model resolves from disk.
 * ETAG is the LFS sha256 for LFS files and the git blob id otherwise, as the hub's
 * X-Linked-Etag / ETag headers give them; of the hub's own first answer (not a CDN's),
 * X-Repo-Commit is checked against the file list's commit and an LFS file's X-Linked-Etag
 * against its sha256.
 *
 * The only file of Rapid that uses libcurl: it is built as its own library (rapid_pull)
 * so that programs that never download do not link it. Up to four files download at once
 * (one thread each, taking the next file when done); on a terminal one line shows the
 * total (bar, bytes, speed, ETA) and a line is printed per finished file; otherwise one
 * line per file. The first error stops the others from starting a new file.
 * Ctrl-C leaves the .incomplete files, which the next pull resumes.
 */
#include "hub.h"
#include "hub_int.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct pull {
    const rp_hub_name *name;
    const rp_hub_pull_params *p;
    char endpoint[1024];
    char auth[1200]; // "Authorization: Bearer TOKEN" or ""
    bool has_token;
    char repo_dir[RP_HUB_PATH_MAX];
    char commit[RP_HUB_REV_MAX];
    int stall_s, retries;
    FILE *log;
    // shared by the download threads
    pthread_mutex_t mu;      // the log, the progress line and the first error
    uint64_t done;           // under mu: bytes of the files finished (received or already there)
    uint64_t got;            // under mu: bytes the finished files received in this pull
    uint64_t total;          // bytes of the model's files
    double t0, last_draw;    // under mu
    int files_left;          // under mu
    struct xfer *active[16]; // under mu: the downloads running, for the total line
} pull;

// What one transfer saw: the status and headers of its first answer, and the body (API
// calls) or the file it appends to (downloads).
typedef struct xfer {
    long first_code; // the first answer's status (the hub's, before a redirect)
    long code;       // the current answer's status
    int n_answers;
    char commit[RP_HUB_REV_MAX];
    char etag[160];
    char *body;
    size_t len, cap, limit;
    int fd;          // download: appended to; -1 for API calls
    uint64_t offset; // bytes the file had before this transfer
    uint64_t written;
    bool restart; // an answer of 200 to a Range request: start the file again
    bool failed_write;
    const char *file;
    double t0;
    atomic_uint_least64_t live; // bytes of the file on disk now (read by the thread drawing the total)
    atomic_uint_least64_t got;  // bytes received by this pull, every attempt (for the speed)
    pull *pl;
} xfer;

static void trim_header(const char *v, size_t n, char *out, size_t cap)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') // a weak ETag: the hub's own mark
        v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
        v++, n -= 2;
    snprintf(out, cap, "%.*s", (int)(n < 512 ? n : 512), v);
}

static size_t on_header(char *data, size_t size, size_t count, void *ud)
{
    xfer *x = ud;
    size_t n = size * count;
    if (n > 5 && !strncmp(data, "HTTP/", 5)) {
        const char *sp = memchr(data, ' ', n);
        x->code = sp ? strtol(sp + 1, NULL, 10) : 0;
        if (x->n_answers++ == 0)
            x->first_code = x->code;
        return n;
    }
    if (x->n_answers != 1) // only the hub's own answer: a CDN's ETag is not the blob's name
        return n;
    const char *colon = memchr(data, ':', n);
    if (!colon)
        return n;
    size_t k = (size_t)(colon - data);
    const char *v = colon + 1;
    size_t vn = n - k - 1;
    if (k == 13 && !strncasecmp(data, "X-Repo-Commit", k))
        trim_header(v, vn, x->commit, sizeof(x->commit));
    else if (k == 13 && !strncasecmp(data, "X-Linked-Etag", k))
        trim_header(v, vn, x->etag, sizeof(x->etag));
    else if (k == 4 && !strncasecmp(data, "ETag", k) && !x->etag[0])
        trim_header(v, vn, x->etag, sizeof(x->etag));
    return n;
}

static size_t on_body(char *data, size_t size, size_t count, void *ud)
{
    xfer *x = ud;
    size_t n = size * count;
    if (x->fd < 0) {
        if (x->len + n > x->limit)
            return 0;
        if (x->len + n + 1 > x->cap) {
            size_t cap = (x->len + n + 1) * 2;
            char *b = rp_realloc(x->body, cap);
            if (!b)
                return 0;
            x->body = b, x->cap = cap;
        }
        memcpy(x->body + x->len, data, n);
        x->len += n;
        x->body[x->len] = 0;
        return n;
    }
    if (x->code != 200 && x->code != 206)
        return n;                                     // an error page: read and dropped, the status says what happened
    if (x->code == 200 && x->offset && !x->restart) { // the Range was ignored: start over
        if (ftruncate(x->fd, 0) || lseek(x->fd, 0, SEEK_SET) < 0) {
            x->failed_write = true;
            return 0;
        }
        x->restart = true;
        x->offset = 0;
        atomic_store(&x->live, 0);
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(x->fd, data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            x->failed_write = true;
            return 0;
        }
        done += (size_t)w;
    }
    x->written += n;
    atomic_fetch_add(&x->live, n);
    atomic_fetch_add(&x->got, n);
    return n;
}

// The total line on a terminal (under pl->mu), at most five times a second unless forced.
static void draw_total(pull *pl, bool force)
{
    double now = rp_time_s();
    if (!force && now - pl->last_draw < 0.2)
        return;
    pl->last_draw = now;
    uint64_t have = pl->done, got = pl->got;
    for (int i = 0; i < 16; i++)
        if (pl->active[i]) {
            have += atomic_load(&pl->active[i]->live);
            got += atomic_load(&pl->active[i]->got);
        }
    if (have > pl->total)
        have = pl->total;
    double dt = now - pl->t0 > 1e-3 ? now - pl->t0 : 1e-3;
    double rate = (double)got / dt;
    char h[32], t[32], r[32], eta[32] = "";
    rp_hub_format_bytes((double)have, h, sizeof(h));
    rp_hub_format_bytes((double)pl->total, t, sizeof(t));
    rp_hub_format_bytes(rate, r, sizeof(r));
    if (pl->total > have && rate > 0) {
        long sec = (long)((double)(pl->total - have) / rate);
        snprintf(eta, sizeof(eta), " ETA %ld:%02ld", sec / 60, sec % 60);
    }
    int pct = pl->total ? (int)(100.0 * (double)have / (double)pl->total) : 100;
    char bar[21];
    for (int i = 0; i < 20; i++)
        bar[i] = i < pct / 5 ? '#' : '.';
    bar[20] = 0;
    fprintf(pl->log, "\r  [%s] %3d%% %s / %s  %s/s%s  %d file%s left\033[K", bar, pct, h, t, r, eta, pl->files_left,
            pl->files_left == 1 ? "" : "s");
    fflush(pl->log);
}

// Adds or removes a running download from the total line.
static void track(pull *pl, xfer *x, bool add)
{
    pthread_mutex_lock(&pl->mu);
    for (int i = 0; i < 16; i++)
        if (add ? !pl->active[i] : pl->active[i] == x) {
            pl->active[i] = add ? x : NULL;
            break;
        }
    pthread_mutex_unlock(&pl->mu);
}

// A file finished (x: a download, untracked now; NULL: already there): its bytes join the done ones.
static void file_done(pull *pl, xfer *x, int64_t size)
{
    if (x)
        track(pl, x, false);
    pthread_mutex_lock(&pl->mu);
    pl->done += size > 0 ? (uint64_t)size : 0;
    pl->files_left--;
    if (x)
        pl->got += atomic_load(&x->got);
    pthread_mutex_unlock(&pl->mu);
}

// A line about one file: above the total line on a terminal, else plain.
static void file_line(pull *pl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void file_line(pull *pl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&pl->mu);
    if (pl->p->progress_bar)
        fprintf(pl->log, "\r\033[K");
    vfprintf(pl->log, fmt, ap);
    if (pl->p->progress_bar)
        draw_total(pl, true);
    fflush(pl->log);
    pthread_mutex_unlock(&pl->mu);
    va_end(ap);
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ult, curl_off_t uln)
{
    xfer *x = ud;
    if (x->fd >= 0 && x->pl->p->progress_bar && !pthread_mutex_trylock(&x->pl->mu)) {
        draw_total(x->pl, false);
        pthread_mutex_unlock(&x->pl->mu);
    }
    return 0;
}

static CURL *easy(pull *pl, const char *url, xfer *x, struct curl_slist **hdrs, const char *range)
{
    *hdrs = NULL;
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    if (pl->auth[0])
        *hdrs = curl_slist_append(*hdrs, pl->auth);
    if (range)
        *hdrs = curl_slist_append(*hdrs, range);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "rapid/" RP_VERSION);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    // The hub sends LFS files to another host; the token goes to the hub only (curl drops
    // Authorization on a redirect to another host unless told otherwise).
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)pl->stall_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)pl->stall_s);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    return c;
}

// One transfer of url into x (a Range header when range is set); CURLE_FAILED_INIT when curl
// could not start one.
static CURLcode perform(pull *pl, const char *url, xfer *x, const char *range)
{
    struct curl_slist *h;
    CURL *c = easy(pl, url, x, &h, range);
    if (!c) {
        curl_slist_free_all(h);
        return CURLE_FAILED_INIT;
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    return rc;
}

// The message for an answer that is not a success, naming what was asked.
static rp_status http_error(pull *pl, long code, const char *what, const char *url)
{
    const char *repo = pl->name->repo;
    if (code == 401)
        return RP_ERR(RP_ERR_IO,
                      "%s: the hub answered 401 Unauthorized for %s: the repo is gated or private%s; set HF_TOKEN or "
                      "pass --hf-token (a token from %s/settings/tokens)",
                      repo, what, pl->has_token ? ", and the token sent was refused" : " and no token was sent",
                      pl->endpoint);
    if (code == 403)
        return RP_ERR(RP_ERR_IO,
                      "%s: the hub answered 403 Forbidden for %s: the token has no access to this repo; ask for access "
                      "on %s/%s (gated models need their license accepted)",
                      repo, what, pl->endpoint, repo);
    if (code == 404)
        return RP_ERR(RP_ERR_IO, "%s: the hub answered 404 Not Found for %s (%s): no such repo, revision or file%s",
                      repo, what, url, pl->has_token ? "" : " (a private repo answers 404 without a token too)");
    return RP_ERR(RP_ERR_IO, "%s: the hub answered HTTP %ld for %s (%s)", repo, code, what, url);
}

static rp_status curl_error(pull *pl, CURLcode rc, const char *what, const char *url)
{
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return RP_ERR(RP_ERR_IO, "%s: %s: no data for %d s from %s (set HF_HUB_DOWNLOAD_TIMEOUT to wait longer)",
                      pl->name->repo, what, pl->stall_s, url);
    return RP_ERR(RP_ERR_IO, "%s: %s: %s (%s)", pl->name->repo, what, curl_easy_strerror(rc), url);
}

// Appends the URL-escaped path (each '/'-separated part escaped) to buf.
static bool append_path(CURL *c, char *buf, size_t cap, const char *path)
{
    size_t used = strlen(buf);
    for (const char *s = path; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char *esc = curl_easy_escape(c, s, (int)n);
        if (!esc)
            return false;
        int w = snprintf(buf + used, cap - used, "%s%s", esc, e ? "/" : "");
        curl_free(esc);
        if (w < 0 || (size_t)w >= cap - used)
            return false;
        used += (size_t)w;
        s += n + (e ? 1 : 0);
    }
    return true;
}

/* ---- the revision's file list ------------------------------------------------ */

static rp_status fetch_info(pull *pl, json_t **out)
{
    *out = NULL;
    xfer x = {.fd = -1, .limit = 64u << 20, .pl = pl};
    char url[4096];
    CURL *tmp = curl_easy_init();
    if (!tmp)
        return RP_ERR(RP_ERR_NOMEM, "curl_easy_init failed");
    char *rev = curl_easy_escape(tmp, pl->name->rev, 0);
    bool ok = rev && rp_hub_fmt(url, sizeof(url), "%s/api/models/%s/revision/%s?blobs=true", pl->endpoint,
                                pl->name->repo, rev);
    curl_free(rev);
    curl_easy_cleanup(tmp);
    if (!ok)
        return RP_ERR(RP_ERR_INVALID, "%s: the URL is too long", pl->name->repo);
    rp_status st = RP_OK;
    for (int attempt = 0;; attempt++) {
        x.len = 0, x.n_answers = 0, x.code = 0, x.first_code = 0;
        CURLcode rc = perform(pl, url, &x, NULL);
        bool retry = attempt < pl->retries && (rc != CURLE_OK || x.code >= 500);
        if (retry)
            continue;
        if (rc != CURLE_OK)
            st = curl_error(pl, rc, "the file list", url);
        else if (x.code != 200)
            st = http_error(pl, x.code, "the file list", url);
        break;
    }
    if (!st) {
        json_error_t je;
        json_t *doc = x.body ? json_loadb(x.body, x.len, 0, &je) : NULL;
        const char *sha = json_string_value(json_object_get(doc, "sha"));
        if (!json_is_object(doc) || !sha || !rp_hub_is_commit(sha) ||
            !json_is_array(json_object_get(doc, "siblings"))) {
            json_decref(doc);
            st = RP_ERR(RP_ERR_INVALID,
                        "%s: the hub's file list (%s) is not what was expected: no \"sha\" commit or "
                        "no \"siblings\"",
                        pl->name->repo, url);
        } else {
            snprintf(pl->commit, sizeof(pl->commit), "%s", sha);
            *out = doc;
        }
    }
    rp_free(x.body);
    return st;
}

/* ---- one file ------------------------------------------------------------------ */

// snapshots/COMMIT/FILE -> ../../blobs/ETAG (one more ../ per folder in FILE), replaced atomically.
static rp_status link_file(pull *pl, const char *file, const char *etag)
{
    char link[RP_HUB_PATH_MAX], dir[RP_HUB_PATH_MAX], target[RP_HUB_PATH_MAX], tmp[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(link, sizeof(link), "%s/snapshots/%s/%s", pl->repo_dir, pl->commit, file))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", file);
    memcpy(dir, link, sizeof(dir));
    *strrchr(dir, '/') = 0;
    rp_status st = rp_hub_mkdirs(dir);
    if (st)
        return st;
    size_t used = (size_t)snprintf(target, sizeof(target), "../../");
    for (const char *s = file; (s = strchr(s, '/')); s++)
        used += (size_t)snprintf(target + used, sizeof(target) - used, "../");
    if (!rp_hub_fmt(target + used, sizeof(target) - used, "blobs/%s", etag) ||
        !rp_hub_fmt(tmp, sizeof(tmp), "%s.tmp.%d.%d", link, (int)getpid(), (int)gettid()))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", file);
    unlink(tmp);
    if (symlink(target, tmp) || rename(tmp, link)) {
        st = RP_ERR(RP_ERR_IO, "%s: %s", link, strerror(errno));
        unlink(tmp);
    }
    return st;
}

static bool size_is(const char *path, int64_t want)
{
    struct stat sb;
    return !stat(path, &sb) && (want < 0 || sb.st_size == want);
}

// Downloads into blob (the lock held), resuming from blob.incomplete. sha256 may be NULL (not LFS).
static rp_status download(pull *pl, const char *file, const char *etag, const char *sha256, int64_t size,
                          const char *blob)
{
    char part[RP_HUB_PATH_MAX], url[8192];
    if (!rp_hub_fmt(part, sizeof(part), "%s.incomplete", blob))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", blob);
    CURL *tmp = curl_easy_init();
    bool ok = tmp && rp_hub_fmt(url, sizeof(url), "%s/%s/resolve/%s/", pl->endpoint, pl->name->repo, pl->commit) &&
              append_path(tmp, url, sizeof(url), file);
    curl_easy_cleanup(tmp);
    if (!ok)
        return RP_ERR(RP_ERR_INVALID, "%s: the URL is too long", file);
    int fd = open(part, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return RP_ERR(RP_ERR_IO, "%s: %s", part, strerror(errno));
    rp_status st = RP_OK;
    xfer x = {.fd = fd, .file = file, .pl = pl};
    x.t0 = rp_time_s();
    track(pl, &x, true);
    uint64_t resumed_from = 0;
    for (int attempt = 0;; attempt++) {
        struct stat sb;
        if (fstat(fd, &sb)) {
            st = RP_ERR(RP_ERR_IO, "%s: %s", part, strerror(errno));
            break;
        }
        if (size >= 0 && sb.st_size == size)
            break;                            // all there already (a pull cut after the last byte)
        if (size >= 0 && sb.st_size > size) { // more than the file: start again
            if (ftruncate(fd, 0)) {
                st = RP_ERR(RP_ERR_IO, "%s: %s", part, strerror(errno));
                break;
            }
            sb.st_size = 0;
        }
        x.offset = (uint64_t)sb.st_size;
        atomic_store(&x.live, x.offset);
        if (attempt == 0)
            resumed_from = x.offset;
        x.written = 0, x.n_answers = 0, x.code = 0, x.first_code = 0, x.restart = false, x.failed_write = false;
        x.etag[0] = x.commit[0] = 0;
        char range[64];
        snprintf(range, sizeof(range), "Range: bytes=%llu-", (unsigned long long)x.offset);
        CURLcode rc = perform(pl, url, &x, x.offset ? range : NULL);
        if (x.failed_write) {
            st = RP_ERR(RP_ERR_IO, "%s: writing failed: %s", part, strerror(errno));
            break;
        }
        if (rc == CURLE_OK && x.code == 416) { // what we have is not a prefix the server knows
            if (ftruncate(fd, 0)) {
                st = RP_ERR(RP_ERR_IO, "%s: %s", part, strerror(errno));
                break;
            }
            if (attempt < pl->retries)
                continue;
        }
        if (rc == CURLE_OK && (x.code == 200 || x.code == 206)) {
            if (x.commit[0] && strcmp(x.commit, pl->commit)) {
                st = RP_ERR(RP_ERR_IO, "%s: the hub sent commit %s for %s, the file list said %s", pl->name->repo,
                            x.commit, file, pl->commit);
                break;
            }
            // an LFS file's X-Linked-Etag is its sha256, the blob's name (a regular file's ETag is
            // not checked: nothing but its name rests on it)
            if (sha256 && x.etag[0] && strcmp(x.etag, etag)) {
                st = RP_ERR(RP_ERR_IO, "%s: %s: the hub's ETag %s differs from the file list's %s", pl->name->repo,
                            file, x.etag, etag);
                break;
            }
            if (size < 0 || x.offset + x.written == (uint64_t)size)
                break;
        }
        bool final_status = rc == CURLE_OK && x.code != 200 && x.code != 206 && x.code < 500 && x.code != 416;
        if (final_status) {
            st = http_error(pl, x.code, file, url);
            break;
        }
        if (attempt >= pl->retries) {
            if (rc != CURLE_OK)
                st = curl_error(pl, rc, file, url);
            else if (x.code >= 300)
                st = http_error(pl, x.code, file, url);
            else
                st = RP_ERR(RP_ERR_IO, "%s: %s: the connection ended at %llu of %lld bytes, %d times", pl->name->repo,
                            file, (unsigned long long)(x.offset + x.written), (long long)size, attempt + 1);
            break;
        }
        usleep(200000u * (unsigned)(attempt + 1));
    }
    if (!st && fsync(fd))
        st = RP_ERR(RP_ERR_IO, "%s: %s", part, strerror(errno));
    close(fd);
    file_done(pl, &x, st ? 0 : size); // (the file's bytes count once it is checked and placed; close enough)
    if (st)
        return st; // the partial file stays for a resume (a bad sha256 below removes it)
    if (sha256) {
        char got[65];
        if ((st = rp_hub_sha256_file(part, got)))
            return st;
        if (strcmp(got, sha256)) {
            unlink(part);
            return RP_ERR(RP_ERR_IO,
                          "%s: %s: sha256 mismatch (the hub says %s, the bytes received are %s): the file was "
                          "deleted and nothing was placed; pull again",
                          pl->name->repo, file, sha256, got);
        }
    }
    if (size >= 0 && !size_is(part, size)) {
        unlink(part);
        return RP_ERR(RP_ERR_IO, "%s: %s: received a file of the wrong size (expected %lld bytes)", pl->name->repo,
                      file, (long long)size);
    }
    if (rename(part, blob))
        return RP_ERR(RP_ERR_IO, "%s: %s", blob, strerror(errno));
    char h[32], r[32];
    double dt = rp_time_s() - x.t0;
    rp_hub_format_bytes((double)size, h, sizeof(h));
    rp_hub_format_bytes(dt > 0 ? (double)(x.offset + x.written - resumed_from) / dt : 0, r, sizeof(r));
    file_line(pl, "%s: %s in %.1f s (%s/s)%s\n", file, h, dt, r, resumed_from ? ", resumed" : "");
    return RP_OK;
}

// One file of the model: in blobs/ already, or downloaded under the blob's lock; then linked.
static rp_status fetch_file(pull *pl, const char *file, const char *etag, const char *sha256, int64_t size)
{
    char blob[RP_HUB_PATH_MAX], locks[RP_HUB_PATH_MAX], lock[RP_HUB_PATH_MAX];
    const char *leaf = strrchr(pl->repo_dir, '/');
    if (!rp_hub_fmt(blob, sizeof(blob), "%s/blobs/%s", pl->repo_dir, etag) ||
        !rp_hub_fmt(locks, sizeof(locks), "%s/.locks/%s", pl->p->cache, leaf ? leaf + 1 : pl->repo_dir) ||
        !rp_hub_fmt(lock, sizeof(lock), "%s/%s.lock", locks, etag))
        return RP_ERR(RP_ERR_INVALID, "path too long in %s", pl->repo_dir);
    rp_status st = RP_OK;
    if (!size_is(blob, size)) {
        char blobs[RP_HUB_PATH_MAX];
        if (!rp_hub_fmt(blobs, sizeof(blobs), "%s/blobs", pl->repo_dir))
            return RP_ERR(RP_ERR_INVALID, "path too long: %s", pl->repo_dir);
        if ((st = rp_hub_mkdirs(blobs)) || (st = rp_hub_mkdirs(locks)))
            return st;
        int lf = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lf < 0)
            return RP_ERR(RP_ERR_IO, "%s: %s", lock, strerror(errno));
        if (flock(lf, LOCK_EX | LOCK_NB)) {
            file_line(pl, "%s: another pull is downloading it; waiting\n", file);
            while (flock(lf, LOCK_EX) && errno == EINTR) {
            }
        }
        if (size_is(blob, size)) // the other pull placed it
            file_done(pl, NULL, size);
        else
            st = download(pl, file, etag, sha256, size, blob);
        flock(lf, LOCK_UN);
        close(lf);
        if (st)
            return st;
    } else {
        file_done(pl, NULL, size);
        file_line(pl, "%s: already there\n", file);
    }
    return link_file(pl, file, etag);
}

// The token huggingface_hub's login stores: $HF_TOKEN_PATH, else $HF_HOME/token, else ~/.cache/huggingface/token.
static const char *token_from_file(char *buf, size_t cap)
{
    char p[RP_HUB_PATH_MAX];
    const char *v = getenv("HF_TOKEN_PATH");
    if (v && *v)
        snprintf(p, sizeof(p), "%s", v);
    else if ((v = getenv("HF_HOME")) && *v)
        snprintf(p, sizeof(p), "%s/token", v);
    else if ((v = getenv("HOME")) && *v)
        snprintf(p, sizeof(p), "%s/.cache/huggingface/token", v);
    else
        return NULL;
    return rp_hub_read_line(p, buf, cap) == RP_OK ? buf : NULL;
}

static rp_status write_ref(pull *pl)
{
    if (rp_hub_is_commit(pl->name->rev))
        return RP_OK;
    char ref[RP_HUB_PATH_MAX], dir[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(ref, sizeof(ref), "%s/refs/%s", pl->repo_dir, pl->name->rev))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", pl->repo_dir);
    memcpy(dir, ref, sizeof(dir));
    *strrchr(dir, '/') = 0;
    rp_status st = rp_hub_mkdirs(dir);
    if (st)
        return st;
    // written beside and renamed over (a pull in another thread or process may write it too)
    char tmp[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(tmp, sizeof(tmp), "%s.tmp.%d.%d", ref, (int)getpid(), (int)gettid()))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", ref);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return RP_ERR(RP_ERR_IO, "%s: %s", tmp, strerror(errno));
    size_t len = strlen(pl->commit);
    bool ok = write(fd, pl->commit, len) == (ssize_t)len && !fsync(fd);
    ok = !close(fd) && ok && !rename(tmp, ref);
    if (!ok) {
        st = RP_ERR(RP_ERR_IO, "%s: %s", ref, strerror(errno));
        unlink(tmp);
    }
    return st;
}

// One file to fetch (pointers into the file list).
typedef struct job {
    const char *file, *etag, *sha256; // sha256 NULL: not an LFS file
    int64_t size;                     // -1: not given
} job;

typedef struct workers {
    pull *pl;
    job *jobs;
    size_t n, next; // under pl->mu
    rp_status st;   // the first error (under pl->mu), its message in msg
    char msg[2048];
} workers;

static void *worker(void *arg)
{
    workers *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->pl->mu);
        size_t i = w->st ? w->n : w->next++;
        pthread_mutex_unlock(&w->pl->mu);
        if (i >= w->n)
            return NULL;
        job *j = &w->jobs[i];
        rp_status st = fetch_file(w->pl, j->file, j->etag, j->sha256, j->size);
        pthread_mutex_lock(&w->pl->mu);
        if (st && !w->st) {
            w->st = st;
            snprintf(w->msg, sizeof(w->msg), "%s", rp_error_message());
        }
        pthread_mutex_unlock(&w->pl->mu);
    }
}

// Fetches the jobs on up to p->parallel threads (0: 4); the first error, re-raised here.
static rp_status run_jobs(pull *pl, job *jobs, size_t n)
{
    workers w = {.pl = pl, .jobs = jobs, .n = n};
    pl->files_left = (int)n;
    pl->t0 = rp_time_s();
    size_t nt = pl->p->parallel > 0 ? (size_t)pl->p->parallel : 4;
    if (nt > n)
        nt = n;
    pthread_t tid[16];
    if (nt > 16)
        nt = 16;
    size_t started = 0;
    for (; started < nt; started++)
        if (pthread_create(&tid[started], NULL, worker, &w))
            break;
    if (!started && n)
        worker(&w); // no thread could start: this one does the work
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (pl->p->progress_bar) {
        pthread_mutex_lock(&pl->mu);
        draw_total(pl, true);
        fprintf(pl->log, "\n");
        pthread_mutex_unlock(&pl->mu);
    }
    return w.st ? RP_ERR(w.st, "%s", w.msg) : RP_OK;
}

rp_status rp_hub_pull(const rp_hub_name *n, const rp_hub_pull_params *p, rp_hub_resolved *out)
{
    memset(out, 0, sizeof(*out));
    if (n->kind == RP_HUB_NAME_PATH)
        return RP_ERR(RP_ERR_INVALID, "%s: a path, not a repo id or alias: nothing to download", n->text);
    if (rp_hub_offline())
        return RP_ERR(RP_ERR_IO, "%s: HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to pull)", n->text);
    pull pl = {.name = n, .p = p, .log = p->log ? p->log : stderr};
    const char *ep = p->endpoint ? p->endpoint : getenv("HF_ENDPOINT");
    if (!ep || !*ep)
        ep = "https://huggingface.co";
    if (!rp_hub_fmt(pl.endpoint, sizeof(pl.endpoint), "%s", ep))
        return RP_ERR(RP_ERR_INVALID, "HF_ENDPOINT is too long");
    for (size_t l = strlen(pl.endpoint); l && pl.endpoint[l - 1] == '/';)
        pl.endpoint[--l] = 0;
    char tokbuf[1024];
    const char *tok = p->token ? p->token : getenv("HF_TOKEN");
    if (!tok || !*tok)
        tok = token_from_file(tokbuf, sizeof(tokbuf));
    if (tok && *tok) {
        if (strpbrk(tok, "\r\n") || !rp_hub_fmt(pl.auth, sizeof(pl.auth), "Authorization: Bearer %s", tok))
            return RP_ERR(RP_ERR_INVALID, "the token is malformed (a line break, or too long)");
        pl.has_token = true;
    }
    const char *v = getenv("HF_HUB_DOWNLOAD_TIMEOUT");
    pl.stall_s = p->stall_s > 0 ? p->stall_s : v && atoi(v) > 0 ? atoi(v) : 10;
    pl.retries = p->retries > 0 ? p->retries : 5;
    if (!p->cache || !rp_hub_repo_dir(p->cache, n->repo, pl.repo_dir, sizeof(pl.repo_dir)))
        return RP_ERR(RP_ERR_INVALID, "no hub cache folder (set HF_HUB_CACHE or HF_HOME)");
    if (curl_global_init(CURL_GLOBAL_DEFAULT))
        return RP_ERR(RP_ERR_IO, "libcurl failed to start");
    pthread_mutex_init(&pl.mu, NULL);

    json_t *info = NULL;
    char **files = NULL;
    bool *keep = NULL;
    job *jobs = NULL;
    size_t nf = 0;
    rp_status st = fetch_info(&pl, &info);
    if (st)
        goto done;
    json_t *sib = json_object_get(info, "siblings");
    nf = json_array_size(sib);
    files = rp_calloc(nf ? nf : 1, sizeof(*files));
    keep = rp_calloc(nf ? nf : 1, sizeof(*keep));
    if (!files || !keep) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nf; i++) {
        const char *f = json_string_value(json_object_get(json_array_get(sib, i), "rfilename"));
        // a name that could leave the snapshot folder is never written
        if (!f || !*f || f[0] == '/' || strstr(f, "..") || strchr(f, '\\')) {
            st = RP_ERR(RP_ERR_INVALID, "%s: the hub's file list has a bad file name", n->repo);
            goto done;
        }
        files[i] = (char *)f;
    }
    long main_file;
    if ((st = rp_hub_select_files((const char *const *)files, nf, n->gguf, n->quant, keep, &main_file))) {
        rp_error_prefix(st, "%s@%s", n->repo, n->rev);
        goto done;
    }
    fprintf(pl.log, "pulling %s (revision %s, commit %.12s) from %s\n", n->repo, n->rev, pl.commit, pl.endpoint);
    jobs = rp_calloc(nf ? nf : 1, sizeof(*jobs));
    if (!jobs) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n_jobs = 0;
    for (size_t i = 0; i < nf && !st; i++) {
        if (!keep[i])
            continue;
        json_t *s = json_array_get(sib, i);
        json_t *lfs = json_object_get(s, "lfs");
        const char *sha = json_string_value(json_object_get(lfs, "sha256"));
        const char *blob_id = json_string_value(json_object_get(s, "blobId"));
        json_t *sz = json_object_get(lfs, "size");
        if (!sz)
            sz = json_object_get(s, "size");
        const char *etag = sha ? sha : blob_id;
        bool etag_ok = etag && *etag && strlen(etag) < 128 && !strchr(etag, '/') && !strstr(etag, "..");
        if (!etag_ok || (sha && strlen(sha) != 64)) {
            st = RP_ERR(RP_ERR_INVALID, "%s: the hub's file list has no usable blobId/lfs.sha256 for %s", n->repo,
                        files[i]);
            break;
        }
        int64_t size = json_is_integer(sz) && json_integer_value(sz) >= 0 ? (int64_t)json_integer_value(sz) : -1;
        jobs[n_jobs++] = (job){files[i], etag, sha, size};
        pl.total += size > 0 ? (uint64_t)size : 0;
    }
    if (!st)
        st = run_jobs(&pl, jobs, n_jobs);
    if (!st)
        st = write_ref(&pl);
    if (!st) {
        rp_hub_name at = *n;
        st = rp_hub_resolve(&at, p->cache, out);
    }
done:
    rp_free(jobs);
    rp_free(files);
    rp_free(keep);
    pthread_mutex_destroy(&pl.mu);
    json_decref(info);
    curl_global_cleanup();
    return st;
}
