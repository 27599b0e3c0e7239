#!/usr/bin/env bash
# Runs make targets one after another as named steps, whatever happens to the earlier ones: each
# step's output goes to the terminal as it runs, then a summary lists every step with its verdict
# and its time, and the exit code is 1 if any step failed.
#
#   tests/scripts/steps.sh TARGET [TARGET …]        (make test, make check)
#
# STEPS_LOG (optional): a file the summary is appended to as well (.ci/run keeps one).
set -uo pipefail

make=${MAKE:-make}
names=()
verdicts=()
times=()
failed=0
started=$SECONDS

for target in "$@"; do
  printf '\n==> step %s\n' "$target"
  t0=$SECONDS
  if "$make" --no-print-directory "$target"; then verdict=ok; else verdict=FAILED; failed=1; fi
  names+=("$target")
  verdicts+=("$verdict")
  times+=($((SECONDS - t0)))
  printf '<== step %s: %s in %ss\n' "$target" "$verdict" "$((SECONDS - t0))"
done

summary() {
  printf '\n%-24s %-8s %s\n' step verdict seconds
  for i in "${!names[@]}"; do
    printf '%-24s %-8s %s\n' "${names[$i]}" "${verdicts[$i]}" "${times[$i]}"
  done
  printf '%-24s %-8s %s\n' total "$([ "$failed" = 0 ] && echo ok || echo FAILED)" "$((SECONDS - started))"
}
summary
[ -z "${STEPS_LOG:-}" ] || summary >>"$STEPS_LOG"
exit "$failed"
