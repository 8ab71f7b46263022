#!/usr/bin/env bash
# The test suite, with the environment each run needs: its own ROS domain on loopback, Ray without auth.
set -uo pipefail
cd "$(dirname "$0")/.."
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( (RANDOM % 100) + 100 ))}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export RAY_AUTH_MODE=disabled
export PYTHONHASHSEED=0
# With no path given pytest runs its testpaths (tests/, pyproject.toml); paths given run just those.
.venv/bin/python -m pytest -q --durations=25 "$@"
rc=$?
# pytest exit 5 means no test was collected: that is a failure here, not a pass.
[ $rc -eq 5 ] && echo "no tests were collected" >&2
exit $rc
