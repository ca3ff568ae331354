# test_lib.sh - sourced by the shell suites (tests/cli, tests/mpi, tests/serve):
# a temporary folder $TMP removed at exit, the pass/fail counters (ok, bad),
# expect_error for the one-line errors of bad input, and for the MPI suites
# require_mpirun and run.

TMP=${TMP:-$(mktemp -d)}
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect_error NEEDLE CMD...: exit code 2, one stderr line containing NEEDLE, no crash
expect_error() {
    local needle=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    local lines; lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 2 ] && grep -q -- "$needle" "$TMP/err" && [ "$lines" -eq 1 ]; then ok
    else bad "expected exit 2 and one line with '$needle' from: $* (rc=$rc, stderr: $(head -c 400 "$TMP/err"))"; fi
}

# require_mpirun: skips the suite (exit 77) without mpirun; lets Open MPI run as
# root and put more ranks than cores on this machine; keeps each suite's Open MPI
# session folders in its own $TMP (ctest runs suites side by side)
require_mpirun() {
    command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export OMPI_MCA_orte_tmpdir_base="$TMP"
}
# run N ARGS...: mpirun -np N, bounded in time
run() { timeout 120 mpirun -np "$@"; }
