#!/usr/bin/env bash
# make quickstart: until the pipeline issue lands, this builds keel and runs
# `keel doctor` on this machine (the main job will replace it).
set -u
BUILD=${1:-build}
echo "keel is built: $BUILD/keel"
echo "The end-to-end pipeline (raw data -> served model) is not built yet;"
echo "for now quickstart checks whether this machine is ready for AI work:"
echo
"$BUILD/keel" doctor
rc=$?
echo
echo "Next: '$BUILD/keel --help' lists the commands."
exit $rc
