/*
 * test_afile.c — results files: an atomic replacement leaves either the old file or the new one
 * and no temporary file, appends add whole lines, and a folder that cannot be made or a path
 * in the way is an error with a reason, the old content kept.
 */
#include "tests/harness.h"

#include "common/afile.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void s_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/test_afile.XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void s_rmrf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void replace_creates_folders_and_leaves_no_temporary_file(void **state)
{
    (void)state;
    char dir[64], path[200], tmp[256], err[256];
    s_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a/b/iter_000001.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(afile_replace(path, "one\n", 4, err, sizeof err), SR_OK);
    assert_string_equal(s_slurp(path), "one\n");
    assert_int_equal(afile_replace(path, "two\n", 4, err, sizeof err), SR_OK);
    assert_string_equal(s_slurp(path), "two\n");
    assert_int_equal(access(tmp, F_OK), -1);
    s_rmrf(dir);
}

static void replace_fails_with_a_reason_when_a_file_is_in_the_folders_way(void **state)
{
    (void)state;
    char dir[64], block[128], path[256], err[256] = "";
    s_tmpdir(dir, sizeof dir);
    snprintf(block, sizeof block, "%s/batches", dir);
    assert_int_equal(afile_replace(block, "x", 1, err, sizeof err), SR_OK);
    snprintf(path, sizeof path, "%s/iter_000001.jsonl", block);
    assert_int_equal(afile_replace(path, "one\n", 4, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot create"));
    assert_string_equal(s_slurp(block), "x");
    s_rmrf(dir);
}

static void replace_keeps_the_old_file_when_the_rename_fails(void **state)
{
    (void)state;
    char dir[64], path[200], tmp[256], err[256] = "";
    s_tmpdir(dir, sizeof dir);
    /* a folder where the file should be: the temporary file is written, the rename refused */
    snprintf(path, sizeof path, "%s/round-1.jsonl", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    char inner[300];
    snprintf(inner, sizeof inner, "%s/keep", path);
    assert_int_equal(afile_replace(inner, "k", 1, err, sizeof err), SR_OK);
    assert_int_equal(afile_replace(path, "one\n", 4, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot rename"));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_string_equal(s_slurp(inner), "k");
    s_rmrf(dir);
}

/* A file written a piece at a time: the pieces in order once committed, the old file until then;
 * an abort or a failed piece leaves the old file and no temporary one, and a write after a
 * failure is refused. */
static void a_file_written_in_pieces_replaces_the_old_one_only_on_commit(void **state)
{
    (void)state;
    char dir[64], path[200], tmp[256], err[256] = "";
    s_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r/round-3.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(afile_replace(path, "old\n", 4, err, sizeof err), SR_OK);
    afile_tmp_t t;
    assert_int_equal(afile_tmp_open(&t, path, err, sizeof err), SR_OK);
    assert_int_equal(afile_tmp_write(&t, "a\n", 2, err, sizeof err), SR_OK);
    assert_int_equal(afile_tmp_write(&t, "", 0, err, sizeof err), SR_OK);
    assert_int_equal(afile_tmp_write(&t, "bc\n", 3, err, sizeof err), SR_OK);
    assert_string_equal(s_slurp(path), "old\n");
    assert_int_equal(access(tmp, F_OK), 0);
    assert_int_equal(afile_tmp_commit(&t, err, sizeof err), SR_OK);
    assert_string_equal(s_slurp(path), "a\nbc\n");
    assert_int_equal(access(tmp, F_OK), -1);
    /* aborted: the old file stays, no temporary file */
    assert_int_equal(afile_tmp_open(&t, path, err, sizeof err), SR_OK);
    assert_int_equal(afile_tmp_write(&t, "zz\n", 3, err, sizeof err), SR_OK);
    afile_tmp_abort(&t);
    afile_tmp_abort(&t); /* twice: nothing */
    assert_string_equal(s_slurp(path), "a\nbc\n");
    assert_int_equal(access(tmp, F_OK), -1);
    /* a piece that cannot be written (the temporary file leads to a full disk) */
    assert_int_equal(symlink("/dev/full", tmp), 0);
    assert_int_equal(afile_tmp_open(&t, path, err, sizeof err), SR_OK);
    assert_int_equal(afile_tmp_write(&t, "x\n", 2, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot write"));
    assert_non_null(strstr(err, "No space"));
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(afile_tmp_write(&t, "y\n", 2, err, sizeof err), SR_EIO);
    assert_int_equal(afile_tmp_commit(&t, err, sizeof err), SR_EIO);
    afile_tmp_abort(&t);
    assert_string_equal(s_slurp(path), "a\nbc\n");
    /* no path */
    assert_int_equal(afile_tmp_open(&t, "", err, sizeof err), SR_EINVAL);
    afile_tmp_abort(&t);
    s_rmrf(dir);
}

static void append_adds_lines_in_order(void **state)
{
    (void)state;
    char dir[64], path[256], err[256];
    s_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out/iterations.jsonl", dir);
    assert_int_equal(afile_append(path, "{\"i\":1}\n", 8, err, sizeof err), SR_OK);
    assert_int_equal(afile_append(path, "{\"i\":2}\n", 8, err, sizeof err), SR_OK);
    assert_string_equal(s_slurp(path), "{\"i\":1}\n{\"i\":2}\n");
    char block[300];
    snprintf(block, sizeof block, "%s/out/iterations.jsonl/x", dir);
    assert_int_equal(afile_append(block, "y\n", 2, err, sizeof err), SR_EIO);
    assert_int_equal(afile_append(NULL, "y\n", 2, err, sizeof err), SR_EINVAL);
    s_rmrf(dir);
}

static void read_returns_the_whole_file_or_says_why_not(void **state)
{
    (void)state;
    char dir[64], path[128], why[128] = "";
    s_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/f.txt", dir);
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(afile_read(path, 100, &text, &n, why, sizeof why), SR_ENOTFOUND);
    assert_null(text);
    assert_string_equal(why, "No such file or directory");
    /* 10,000 bytes: more than the first chunk of a stream, exactly the limit. */
    char big[10000];
    memset(big, 'x', sizeof big);
    assert_int_equal(afile_replace(path, big, sizeof big, NULL, 0), SR_OK);
    assert_int_equal(afile_read(path, sizeof big, &text, &n, why, sizeof why), SR_OK);
    assert_int_equal(n, sizeof big);
    assert_memory_equal(text, big, sizeof big);
    assert_int_equal(text[n], '\0');
    free(text);
    assert_int_equal(afile_read(path, sizeof big - 1, &text, NULL, why, sizeof why), SR_ETOOBIG);
    assert_null(text);
    assert_string_equal(why, "larger than 9999 bytes");
    /* A file whose size stat does not know (procfs says 0) is read in chunks. */
    assert_int_equal(afile_read("/proc/self/status", 1 << 20, &text, &n, NULL, 0), SR_OK);
    assert_true(n > 0 && strlen(text) == n);
    free(text);
    s_rmrf(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replace_creates_folders_and_leaves_no_temporary_file),
        cmocka_unit_test(a_file_written_in_pieces_replaces_the_old_one_only_on_commit),
        cmocka_unit_test(replace_fails_with_a_reason_when_a_file_is_in_the_folders_way),
        cmocka_unit_test(replace_keeps_the_old_file_when_the_rename_fails),
        cmocka_unit_test(append_adds_lines_in_order),
        cmocka_unit_test(read_returns_the_whole_file_or_says_why_not),
    };
    return harness_run_("afile", tests, SR_ARRAY_LEN(tests), argc, argv);
}
