# Sourced by the examples' CTest scripts (after they set `work`): an empty work directory, and `mpi`,
# the mpirun flags these tests use (several ranks on few cores, and root in CI).
rm -rf "$work"
mkdir -p "$work"
mpi=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then mpi+=(--allow-run-as-root); fi
