# The test harness that scripts/test-release.sh and scripts/test-contrib.sh
# source: `t NAME CMD...` runs one test (it fails when CMD fails or calls
# `fail`), `fail MESSAGE` records why, `summary LABEL` prints the failed
# names and "LABEL: N passed, M failed" and fails when any test did.

PASSED=0
FAILED=0
FAILURES=()
TEST_FAILED=0

fail() {
    echo "    $*" >&2
    TEST_FAILED=1
    return 1
}

t() {
    local name=$1 start=$SECONDS
    shift
    TEST_FAILED=0
    if "$@" && [[ $TEST_FAILED == 0 ]]; then
        PASSED=$((PASSED + 1))
        echo "ok   $name ($((SECONDS - start)) s)"
    else
        FAILED=$((FAILED + 1))
        FAILURES+=("$name")
        echo "FAIL $name"
    fi
}

summary() {
    local name
    for name in "${FAILURES[@]}"; do echo "failed: $name"; done
    echo "$1: $PASSED passed, $FAILED failed"
    [[ $FAILED == 0 ]]
}
