/*
 * file.c - whole-file reads, read-only mmap and path helpers.
 *
 * Model weights are mapped, never copied: rp_file_map maps a file read-only and
 * the model keeps the mapping for its lifetime. Files Rapid writes (converted
 * models, cache blocks) go through rp_file_writer: temp name, fsync, rename.
 */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

rp_status rp_file_map(const char *path, rp_mapping *out)
{
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return RP_ERR(RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return RP_ERR(RP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return RP_ERR(RP_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return RP_ERR(RP_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
    }
    close(fd);
    return RP_OK;
}

void rp_file_unmap(rp_mapping *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

rp_status rp_file_read(const char *path, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return RP_ERR(RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = rp_malloc(cap);
    if (!buf) {
        fclose(f);
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = rp_realloc(buf, cap * 2);
            if (!nb) {
                rp_free(buf);
                fclose(f);
                return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        rp_free(buf);
        return RP_ERR(RP_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return RP_OK;
}

rp_status rp_file_writer_open(rp_file_writer *w, const char *path)
{
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    size_t n = strlen(path) + 32;
    w->path = rp_strdup(path);
    w->tmp = rp_malloc(n);
    if (!w->path || !w->tmp) {
        rp_file_writer_abort(w);
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rp_status st = RP_ERR(RP_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        rp_free(w->tmp);
        w->tmp = NULL; // nothing to remove
        rp_file_writer_abort(w);
        return st;
    }
    return RP_OK;
}

rp_status rp_file_writer_write(rp_file_writer *w, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n && !w->st) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            w->st = RP_ERR(RP_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
            break;
        }
        p += k;
        n -= (size_t)k;
    }
    return w->st;
}

rp_status rp_file_writer_zeros(rp_file_writer *w, size_t n)
{
    static const uint8_t zeros[256];
    while (n && !w->st) {
        size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
        rp_file_writer_write(w, zeros, k);
        n -= k;
    }
    return w->st;
}

rp_status rp_file_writer_commit(rp_file_writer *w)
{
    if (!w->st && fsync(w->fd) != 0)
        w->st = RP_ERR(RP_ERR_IO, "%s: cannot sync: %s", w->path, strerror(errno));
    return rp_file_writer_publish(w);
}

rp_status rp_file_writer_publish(rp_file_writer *w)
{
    int rc = close(w->fd);
    w->fd = -1;
    if (!w->st && rc != 0)
        w->st = RP_ERR(RP_ERR_IO, "%s: cannot close: %s", w->path, strerror(errno));
    if (!w->st && rename(w->tmp, w->path) != 0)
        w->st = RP_ERR(RP_ERR_IO, "%s: cannot rename into place: %s", w->path, strerror(errno));
    rp_status st = w->st;
    if (st) {
        rp_file_writer_abort(w);
    } else {
        rp_free(w->path);
        rp_free(w->tmp);
        memset(w, 0, sizeof(*w));
        w->fd = -1;
    }
    return st;
}

void rp_file_writer_abort(rp_file_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    rp_free(w->path);
    rp_free(w->tmp);
    rp_status st = w->st;
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    w->st = st;
}

bool rp_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool rp_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *rp_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    while (a > 1 && dir[a - 1] == '/')
        a--;
    char *p = rp_malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

double rp_time_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
