# Shared by CI's support-matrix jobs (.ci/colab-replica, .ci/oldest): sourced, not run.
#
# Each job makes its virtual environment anew under $MHA_COURSE_CI_ENVS (default: a folder under
# ${TMPDIR:-/tmp}) and installs into it through a wheelhouse of its own under $MHA_COURSE_CI_CACHE
# (default ~/.cache/mha-course-ci): the first run downloads every wheel there, a later run on the
# same machine downloads only what is missing. (pip's own HTTP cache is not enough: where the
# package index answers with responses it may not store, pip downloads everything each time.)

ci_envs=${MHA_COURSE_CI_ENVS:-${TMPDIR:-/tmp}/mha-course-ci}
ci_cache=${MHA_COURSE_CI_CACHE:-$HOME/.cache/mha-course-ci}

# find_python X.Y: print the path of a Python X.Y (python X.Y on PATH, or pyenv's), or fail.
find_python() {
  local version=$1 candidate
  for candidate in "python$version" "$(pyenv root 2>/dev/null)/versions/$version."*/bin/python \
    "$HOME/.pyenv/versions/$version."*/bin/python; do
    if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$version'" 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  echo "no Python $version found (on PATH as python$version, or installed with pyenv)" >&2
  return 1
}

# new_env NAME PYTHON: a fresh virtual environment $ci_envs/NAME; prints its path.
new_env() {
  local env="$ci_envs/$1"
  rm -rf "$env"
  mkdir -p "$ci_envs"
  "$2" -m venv "$env"
  echo "$env"
}

# cached_install ENV NAME PIP-INSTALL-ARGUMENTS...: pip install into ENV from the wheelhouse NAME,
# downloading there first what it lacks (an editable `-e DIR` is downloaded as DIR: its
# dependencies).
cached_install() {
  local env=$1 wheels="$ci_cache/$2" argument
  shift 2
  local download=()
  for argument in "$@"; do [ "$argument" = -e ] || download+=("$argument"); done
  mkdir -p "$wheels"
  "$env/bin/python" -m pip download --quiet --dest "$wheels" "${download[@]}"
  # (--no-compile: Python compiles what is imported when it is imported; compiling all of torch
  # and its CUDA libraries' Python files up front costs minutes)
  "$env/bin/python" -m pip install --quiet --no-compile --no-index --find-links "$wheels" "$@"
}

# seconds_since START: whole seconds since START (a `date +%s`).
seconds_since() { echo $(( $(date +%s) - $1 )); }
