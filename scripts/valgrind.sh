#!/usr/bin/env bash
# valgrind memcheck over the C unit tests and the Python test suite (docs/security.md#valgrind).
#
#   scripts/valgrind.sh              C unit tests, then the whole Python suite (-m "not tshark")
#   scripts/valgrind.sh --quick      C unit tests, then a subset of the Python suite that calls every
#                                    C entry point of the extension (a few minutes: for CI)
#   scripts/valgrind.sh --c-only     only the C unit tests
#   scripts/valgrind.sh --python-only [--quick]
#   scripts/valgrind.sh [--quick] -- <pytest arguments>   (replaces the Python test selection)
#
# C tests: every test program under memcheck, any error or definite/possible leak fails.
# Python: the interpreter runs under memcheck with PYTHONMALLOC=malloc (every object is a malloc
# block memcheck can see); any memory error fails, and so does a definite leak other than the
# interpreter's and cffi's own blocks left at exit (scripts/valgrind.supp names only their frames,
# never the core's).  Subprocesses that tests start (the CLIs via `python -m`, tshark) run
# natively.  Logs: build/valgrind/.  Hypothesis runs its derandomized "ci" profile with
# PE_HYPOTHESIS_EXAMPLES (default 10) examples per property.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc)

quick=0 c=1 py=1
pytest_args=()
while (($#)); do
    case "$1" in
        --quick) quick=1 ;;
        --c-only) py=0 ;;
        --python-only) c=0 ;;
        --) shift; pytest_args=("$@"); break ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
LOGS=build/valgrind
rm -rf "$LOGS" && mkdir -p "$LOGS"
SUPP=(--suppressions="$ROOT/scripts/valgrind.supp")
[[ -f /usr/lib/valgrind/python3.supp ]] && SUPP+=(--suppressions=/usr/lib/valgrind/python3.supp)
failed=()
t_start=$SECONDS

if ((c)); then
    echo "==> C unit tests under memcheck"
    cmake -S core -B build/core-valgrind -DCMAKE_BUILD_TYPE=Debug >/dev/null
    cmake --build build/core-valgrind -j "$JOBS" >/dev/null
    for t in build/core-valgrind/test_*; do
        [[ -x "$t" && -f "$t" ]] || continue
        name=$(basename "$t")
        t0=$SECONDS
        # The tests run from the repository root, as ctest runs them.
        if valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,possible \
                --track-origins=yes --num-callers=40 --log-file="$LOGS/$name.log" "$t" >"$LOGS/$name.out" 2>&1; then
            echo "    $name: clean ($((SECONDS - t0)) s)"
        else
            echo "    $name: FAILED ($((SECONDS - t0)) s), see $LOGS/$name.log" >&2
            grep -E "ERROR SUMMARY|Invalid|uninitialised|definitely|possibly" "$LOGS/$name.log" | head -20 >&2 || true
            tail -5 "$LOGS/$name.out" >&2
            failed+=("$name")
        fi
    done
fi

if ((py)); then
    if ((${#pytest_args[@]} == 0)); then
        if ((quick)); then
            # Between them these call every function of the extension's cdef (docs/security.md#valgrind).
            pytest_args=(tests/shared/test_primitives.py tests/psp/test_psp_api.py tests/eesp/test_eesp_api.py tests/eesp/test_eesp_api_config.py
                         tests/eesp/test_eesp_api_receiver.py tests/eesp/test_eesp_replay.py
                         tests/psp/test_psp_capture.py tests/eesp/test_eesp_capture.py tests/psp/test_psp_cli.py tests/eesp/test_eesp_cli.py
                         tests/shared/test_security.py)
        else
            pytest_args=(tests)
        fi
        pytest_args+=(-m "not tshark")
    fi
    echo "==> Python tests under memcheck: pytest ${pytest_args[*]}"
    t0=$SECONDS
    set +e
    PYTHONUNBUFFERED=1 PYTHONMALLOC=malloc HYPOTHESIS_PROFILE=ci PE_HYPOTHESIS_EXAMPLES="${PE_HYPOTHESIS_EXAMPLES:-10}" \
        valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
            "${SUPP[@]}" --num-callers=40 --log-file="$LOGS/python.%p.log" \
            .venv/bin/python -m pytest -q -p no:cacheprovider "${pytest_args[@]}" 2>&1 | tee "$LOGS/pytest.out" | tail -15
    rc=${PIPESTATUS[0]}
    set -e
    main_log=$(grep -l "Command: .*pytest" "$LOGS"/python.*.log | head -1)
    summary=$(grep "ERROR SUMMARY" "$main_log" | tail -1 | sed 's/^==[0-9]*== //')
    echo "    $summary"
    echo "    pytest exit status $rc after $((SECONDS - t0)) s; memcheck log: $main_log"
    if [[ $rc == 99 ]] || ! grep -q "ERROR SUMMARY: 0 errors" "$main_log"; then
        echo "    memcheck found errors in the Python run, see $main_log" >&2
        failed+=("python (memcheck)")
    elif [[ $rc != 0 ]]; then
        failed+=("python (tests failed, exit $rc)")
    fi
fi

echo "==> valgrind.sh done in $((SECONDS - t_start)) s"
if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "all clean"
