# The README's tour must be what its commands print today: tools/gen-tour.py
# runs them all in a fresh folder, and its comparison masks what varies
# between runs (durations, rates, dates, the doctor's machine facts). The
# comparison must also notice a stale number.
. "$KEEL_SRC/tests/integration/lib.sh"
gen="$KEEL_SRC/tools/gen-tour.py"
if TMPDIR="$T" "$PYTHON" "$gen" "$KEEL" "$KEEL_SRC/README.md" "$T/regen.md" > "$T/out" 2> "$T/err"; then
  pass docs_tour_runs
  if "$PYTHON" "$gen" --compare "$KEEL_SRC/README.md" "$T/regen.md" 2> "$T/err"; then pass docs_tour_fresh
  else fail docs_tour_fresh "$(head -c 900 "$T/err")"; fi
  # a README whose tour shows an accuracy the training does not give is caught
  sed 's/^accuracy  \([0-9.]*\)%/accuracy  1\1%/' "$KEEL_SRC/README.md" > "$T/stale.md"
  if ! grep -q '^accuracy  1' "$T/stale.md"; then
    fail docs_tour_catches_stale "the README tour has no accuracy line to alter"
  elif "$PYTHON" "$gen" --compare "$T/stale.md" "$T/regen.md" 2> "$T/err2"; then
    fail docs_tour_catches_stale "an altered accuracy passed the check"
  elif grep -q 'accuracy' "$T/err2"; then pass docs_tour_catches_stale
  else fail docs_tour_catches_stale "$(head -c 400 "$T/err2")"; fi
else
  fail docs_tour_runs "$(head -c 900 "$T/err")"
fi
