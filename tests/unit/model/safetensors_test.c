/* tests/unit/model/safetensors_test.c - the reader rejects malformed files with clear errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "model/safetensors.h"

static void write_file(const char *dir, const char *header, const void *data, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t hl = strlen(header);
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, hl, f);
    fwrite(data, 1, n, f);
    fclose(f);
}

static rp_status open_with(const char *header, size_t n_data, rp_err *err)
{
    char dir[] = "/tmp/rp_st_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    static float data[64];
    write_file(dir, header, data, n_data);
    rp_st *st = NULL;
    rp_status rc = rp_st_open(dir, &st, err);
    if (rc == RP_OK) {
        const rp_st_tensor *t = rp_st_find(st, "a");
        cr_assert_not_null(t);
        cr_assert_eq(t->t.shape[0], 2);
        cr_assert_eq(t->t.n_bytes, 8);
    }
    rp_st_close(st);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

Test(safetensors, good_file_opens)
{
    rp_err err;
    cr_assert_eq(open_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"__metadata__\":{\"format\":\"pt\"}}",
                           8, &err),
                 RP_OK, "%s", err.msg);
}

Test(safetensors, malformed_files_are_rejected)
{
    rp_err err;
    cr_assert_eq(open_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,80]}}", 8,
                           &err),
                 RP_ERR_INVALID);
    cr_assert(strstr(err.msg, "'a'"), "%s", err.msg);
    cr_assert_eq(open_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                           &err),
                 RP_ERR_INVALID);
    cr_assert_eq(open_with("{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                           &err),
                 RP_ERR_UNSUPPORTED);
    cr_assert_eq(open_with("not json", 8, &err), RP_ERR_INVALID);
    cr_assert_eq(open_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                           &err),
                 RP_ERR_INVALID);
}

Test(safetensors, missing_weights_say_so)
{
    rp_err err;
    rp_st *st;
    cr_assert_eq(rp_st_open("/tmp", &st, &err), RP_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "model.safetensors"), "%s", err.msg);
}
