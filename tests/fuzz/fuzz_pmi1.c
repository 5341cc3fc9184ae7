/*
 * fuzz_pmi1.c - libFuzzer target for the PMI-1 lines a launcher sends (src/boot/boot_pmi1.c):
 * the answers to init, get_maxes, get_my_kvsname, put, barrier_in and get, including the
 * PMI_process_mapping vector and the base64 chunks of a value.  The input (after one byte
 * that chooses the job's size, this rank, and whether MPI_LOCALRANKID is set) is the whole
 * stream the server would send: it is written into one end of a socket pair, whose other end
 * is PMI_FD; then init, a put, a fence and two gets run against it, as a rank would.  The
 * stream ends after the input, so nothing waits for more than the input holds.
 * fy_boot_pmi1_close drops the connection the backend keeps for the process, so each input
 * starts from nothing.
 */
#include <sys/socket.h>
#include <unistd.h>

#include "boot/boot_int.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    unsetenv("PMI_PORT");
    return 0;
}

static void seed(const char *name, uint8_t sel, const char *text)
{
    fz_seed(name, &sel, 1, text, strlen(text));
}

/* a genuine exchange with hydra, two ranks on one host, a value of 5 bytes in one chunk */
static const char hydra[] = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
                            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
                            "cmd=my_kvsname kvsname=kvs_123_0\n"
                            "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"
                            "cmd=put_result rc=0\n"
                            "cmd=barrier_out\n"
                            "cmd=get_result rc=0 msg=success value=5.1.aGVsbG8\n"
                            "cmd=get_result rc=-1 msg=key_fy:1:x_not_found\n";

static int seeds_written;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!seeds_written) {
        seeds_written = 1;
        seed("hydra_np2", 0x09, hydra); /* size 2, rank 1 */
        seed("hydra_local_env", 0x89, hydra);
    }
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    int np = 1 + (int)(sel & 7), rank = (int)((sel >> 3) & 15) % np;
    data++, size--;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return 0;
    /* the server's whole stream, then its end of the stream (the socket buffer holds it) */
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(sv[0], data + off, size - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(sv[0], SHUT_WR);

    char v[32];
    snprintf(v, sizeof(v), "%d", sv[1]);
    setenv("PMI_FD", v, 1);
    snprintf(v, sizeof(v), "%d", np);
    setenv("PMI_SIZE", v, 1);
    snprintf(v, sizeof(v), "%d", rank);
    setenv("PMI_RANK", v, 1);
    if (sel & 0x80) {
        setenv("MPI_LOCALNRANKS", "1", 1);
        setenv("MPI_LOCALRANKID", "0", 1);
    } else {
        unsetenv("MPI_LOCALNRANKS");
        unsetenv("MPI_LOCALRANKID");
    }

    fy_boot_t boot;
    memset(&boot, 0, sizeof(boot));
    boot.ops = &fy_boot_pmi1_ops;
    boot.timeout_ns = 2000000000ull; /* never reached: the stream ends */
    if (boot.ops->init(&boot) == FERRY_OK) {
        char out[256];
        size_t n = sizeof(out);
        boot.ops->put(&boot, "x", "hello", 5);
        boot.ops->fence(&boot);
        boot.ops->get(&boot, 0, "x", out, &n);
        n = 3; /* too small for most values: the TRUNCATED path */
        boot.ops->get(&boot, np - 1, "x", out, &n);
        boot.ops->finalize(&boot);
        fy_boot_pmi1_close(); /* closes sv[1] */
    } else {
        close(sv[1]);
    }
    close(sv[0]);

    /* the base64 decoder on its own, on the same bytes */
    uint8_t *dec = malloc(size + 1);
    if (dec != NULL)
        fy_b64_decode((const char *)data, size, dec);
    free(dec);
    return 0;
}
