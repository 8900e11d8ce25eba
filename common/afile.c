/*
 * afile.c — atomic replacement and synced appends of results files (see afile.h).
 */
#include "common/afile.h"

#include "common/sr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int afile_mkdirs(const char *path)
{
    if (!path || !*path)
        return SR_EINVAL;
    char *p = sr_xstrdup(path);
    int rc = SR_OK;
    for (char *c = p + 1;; c++) {
        if (*c == '/' || *c == '\0') {
            char saved = *c;
            *c = '\0';
            struct stat sb;
            if (mkdir(p, 0755) != 0 &&
                (errno != EEXIST || stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
                if (errno == EEXIST)
                    errno = ENOTDIR;
                rc = sr_from_errno(errno);
                break;
            }
            *c = saved;
            if (saved == '\0')
                break;
        }
    }
    free(p);
    return rc;
}

/* s_parent writes path's folder into buf ("." for a bare name); returns 0, or -1 when the
 * path has a folder that cannot be created (err says why). */
static int s_parent(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, len, ".");
        return 0;
    }
    if (slash == path) {
        snprintf(buf, len, "/");
        return 0;
    }
    snprintf(buf, len, "%.*s", (int)(slash - path), path);
    if (afile_mkdirs(buf) != SR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot create %s: %s", buf, strerror(errno));
        return -1;
    }
    return 0;
}

/* s_write_all writes len bytes to fd, resuming after EINTR and short writes. */
static int s_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == 0)
            errno = EIO;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

void afile_tmp_abort(afile_tmp_t *t)
{
    if (!t)
        return;
    if (t->fd >= 0) {
        close(t->fd);
        unlink(t->tmp);
    }
    t->fd = -1;
    free(t->tmp);
    free(t->path);
    t->tmp = t->path = NULL;
}

int afile_tmp_open(afile_tmp_t *t, const char *path, char *err, size_t errlen)
{
    t->fd = -1;
    t->tmp = t->path = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!path || !*path) {
        if (err && errlen)
            snprintf(err, errlen, "afile_tmp_open: no path");
        return SR_EINVAL;
    }
    char dir[4096];
    if (s_parent(path, dir, sizeof dir, err, errlen) != 0)
        return SR_EIO;
    size_t tl = strlen(path) + 8;
    char *tmp = sr_xmalloc(tl);
    snprintf(tmp, tl, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return SR_EIO;
    }
    t->fd = fd;
    t->tmp = tmp;
    t->path = sr_xstrdup(path);
    return SR_OK;
}

int afile_tmp_write(afile_tmp_t *t, const void *data, size_t len, char *err, size_t errlen)
{
    if (t->fd < 0 || (!data && len)) {
        if (err && errlen)
            snprintf(err, errlen, "afile_tmp_write: no open file or no data");
        return SR_EIO;
    }
    if (s_write_all(t->fd, data, len) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: %s", t->tmp, strerror(errno ? errno : EIO));
        afile_tmp_abort(t);
        return SR_EIO;
    }
    return SR_OK;
}

int afile_tmp_commit(afile_tmp_t *t, char *err, size_t errlen)
{
    if (t->fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "afile_tmp_commit: no open file");
        return SR_EIO;
    }
    errno = 0;
    if (fsync(t->fd) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: %s", t->tmp, strerror(errno ? errno : EIO));
        afile_tmp_abort(t);
        return SR_EIO;
    }
    int cerr = close(t->fd);
    t->fd = -1;
    if (cerr != 0 || rename(t->tmp, t->path) != 0) {
        if (err && errlen && cerr != 0)
            snprintf(err, errlen, "cannot write %s: %s", t->tmp, strerror(errno));
        else if (err && errlen)
            snprintf(err, errlen, "cannot rename %s to %s: %s", t->tmp, t->path, strerror(errno));
        unlink(t->tmp);
        afile_tmp_abort(t);
        return SR_EIO;
    }
    /* the rename itself is durable once the folder is synced */
    char dir[4096];
    const char *slash = strrchr(t->path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == t->path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - t->path), t->path);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    afile_tmp_abort(t); /* closed already: frees the names */
    return SR_OK;
}

int afile_replace(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!path || !*path || (!data && len)) {
        if (err && errlen)
            snprintf(err, errlen, "afile_replace: no path or no data");
        return SR_EINVAL;
    }
    afile_tmp_t t;
    int rc = afile_tmp_open(&t, path, err, errlen);
    if (rc == SR_OK)
        rc = afile_tmp_write(&t, data, len, err, errlen);
    if (rc == SR_OK)
        rc = afile_tmp_commit(&t, err, errlen);
    return rc;
}

int afile_append(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!path || !*path || (!data && len)) {
        if (err && errlen)
            snprintf(err, errlen, "afile_append: no path or no data");
        return SR_EINVAL;
    }
    char dir[4096];
    if (s_parent(path, dir, sizeof dir, err, errlen) != 0)
        return SR_EIO;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot append to %s: %s", path, strerror(errno));
        return SR_EIO;
    }
    int rc = SR_OK;
    off_t start = lseek(fd, 0, SEEK_END);
    if (s_write_all(fd, data, len) != 0 || fsync(fd) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot append to %s: %s", path, strerror(errno ? errno : EIO));
        if (start >= 0 && ftruncate(fd, start) != 0)
            (void)0; /* the reason above is the one that matters */
        rc = SR_EIO;
    }
    if (close(fd) != 0 && rc == SR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot append to %s: %s", path, strerror(errno));
        rc = SR_EIO;
    }
    return rc;
}

int afile_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        sr_fmt(err, errlen, "%s", strerror(e));
        return e == ENOENT ? SR_ENOTFOUND : sr_from_errno(e);
    }
    /* Read up to max + 1 bytes (one more than max says it is too big): at once for a regular
     * file of a known size, else in doubling chunks. */
    struct stat sb;
    size_t cap = 4096, n = 0;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= (off_t)cap)
        cap = (uint64_t)sb.st_size < max ? (size_t)sb.st_size + 1 : max + 1;
    if (cap > max)
        cap = max + 1;
    char *buf = sr_xmalloc(cap + 1);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || n > max)
            break;
        cap = cap > max / 2 ? max + 1 : cap * 2;
        buf = sr_xrealloc(buf, cap + 1);
    }
    int rc = ferror(f) ? SR_EIO : n > max ? SR_ETOOBIG : SR_OK;
    fclose(f);
    if (rc != SR_OK) {
        if (rc == SR_EIO)
            sr_fmt(err, errlen, "read error");
        else
            sr_fmt(err, errlen, "larger than %zu bytes", max);
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return SR_OK;
}
