/* error.h - status codes and the one error message a failing call leaves behind.
 *
 * Library code never exits: it sets a message that names the thing at fault
 * (file, tensor, flag, layer) and returns a status that callers propagate.
 * Only the CLI's top level turns a status into an exit code. */
#ifndef LZ_ERROR_H
#define LZ_ERROR_H

typedef enum {
    LZ_OK = 0,
    LZ_ERR_INPUT = 2,    /* bad input: file, tensor, config, flag, id -> exit code 2 */
    LZ_ERR_IO = 3,       /* the OS refused (open, mmap, write)          -> exit code 2 */
    LZ_ERR_NOMEM = 4,    /* allocation failed                           -> exit code 1 */
    LZ_ERR_INTERNAL = 5, /* a bug or a backend failure                  -> exit code 1 */
} lz_status;

/* Records the message (printf format) and returns `status`, so that
 * `return lz_fail(LZ_ERR_INPUT, "...", ...);` reads as one statement.
 * The first message since the last lz_error_clear() wins: an outer caller
 * may add context with lz_error_prefix() instead of overwriting the cause. */
lz_status lz_fail(lz_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lz_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* lz_fail for a failed library call (CUDA, cuBLAS, NCCL, MPI: each library's one check macro): the
 * message begins "rank R (host): " in a pipeline of several ranks and ends " (file:line)". */
lz_status lz_fail_at(lz_status status, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The process's rank among size, and its host, for lz_fail_at (mpi_world sets it under mpirun). */
void lz_error_set_rank(int rank, int size, const char *host);
/* "rank R of N (host): " in a pipeline of several ranks, else "" (for the CLI's last line). */
const char *lz_error_rank_prefix(void);
const char *lz_error_message(void);
void lz_error_clear(void);

/* Exit code the CLI uses for a status. */
int lz_status_exit_code(lz_status status);

#define LZ_TRY(expr)                          \
    do {                                      \
        lz_status lz_try_status_ = (expr);    \
        if (lz_try_status_ != LZ_OK)          \
            return lz_try_status_;            \
    } while (0)

#endif
