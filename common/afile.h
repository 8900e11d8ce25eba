/*
 * afile.h — the one way selroll writes a results file: whole files replaced atomically
 * (temporary file, fsync, rename, fsync of the folder) and lines appended with their fsync; and
 * the one way it reads a whole file (a configuration, a template, weights) into memory.
 *
 * These calls block on the disk. A reactor thread never calls them: the coordinator runs them
 * on its file queue (coord_file_write, a storeq without Redis) or on its round writer, so a slow
 * or full disk costs the write's latency, never the loop's.
 */
#ifndef SR_AFILE_H
#define SR_AFILE_H

#include <stddef.h>

/* afile_mkdirs creates path and its missing parents (mode 0755). Returns SR_OK (also when they
 * exist), SR_EINVAL for an empty path, or the translated errno. */
int afile_mkdirs(const char *path);

/* afile_replace makes path hold exactly len bytes of data: it creates the parent folders, writes
 * "<path>.tmp", syncs it, renames it over path and syncs the folder. On failure path is left as
 * it was, the temporary file is removed and err (errlen bytes, may be NULL) says which step
 * failed. Returns SR_OK or SR_EIO. */
int afile_replace(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* A file replaced as afile_replace does, written a piece at a time: afile_tmp_open creates the
 * parent folders and "<path>.tmp", afile_tmp_write appends to it (as many calls as the caller
 * likes: a writer that formats into a small reused buffer and hands it over whenever it fills
 * keeps its buffer in the cache and never touches fresh pages for the whole text), and
 * afile_tmp_commit syncs it, renames it over path and syncs the folder. On any failure (and on
 * afile_tmp_abort) the temporary file is removed and path is left as it was. Each call returns
 * SR_OK or SR_EIO with the same reason in err as afile_replace gives; after a failure the
 * writer is closed (a later call returns SR_EIO, afile_tmp_abort does nothing). */
typedef struct {
    int fd;     /* -1 when closed */
    char *tmp;  /* "<path>.tmp" (heap) */
    char *path; /* heap */
} afile_tmp_t;

int afile_tmp_open(afile_tmp_t *t, const char *path, char *err, size_t errlen);
int afile_tmp_write(afile_tmp_t *t, const void *data, size_t len, char *err, size_t errlen);
int afile_tmp_commit(afile_tmp_t *t, char *err, size_t errlen);
void afile_tmp_abort(afile_tmp_t *t);

/* afile_append appends len bytes of data to path (created with its parent folders when missing)
 * and syncs it. A short write is truncated away again, so a retry does not leave half a line.
 * Returns SR_OK or SR_EIO with a reason in err. */
int afile_append(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* afile_read reads all of path into *out (heap, with a NUL after the last byte; the caller frees
 * it) and its length into *len (may be NULL). Returns SR_OK; SR_ENOTFOUND when path does not
 * exist and the translated errno when it cannot be opened (err: strerror's text); SR_EIO on a
 * read error (err: "read error"); SR_ETOOBIG when it holds more than max bytes (err: "larger
 * than <max> bytes"). *out is NULL on failure; err (errlen bytes) may be NULL. */
int afile_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen);

#endif
