# shellcheck shell=bash
# unpack_wheels DIR SITE [PY]: every wheel (*.whl) and unpacked wheel packed as *.tar.xz in DIR, into SITE (a
# folder first on PYTHONPATH), with PY's zipfile (default python). Not pip: the livekit namespace is split over
# several wheels, and pip --target would replace one part's folder with another's. Used by scripts/gpu_many.sh and
# scripts/gpu_properties.sh on the device machine, whose image lacks the call stack.
unpack_wheels() {
  local dir=$1 site=$2 py=${3:-python} f
  mkdir -p "$site"
  for f in "$dir"/*.whl; do [ -e "$f" ] && { "$py" -m zipfile -e "$f" "$site" || return 1; }; done
  for f in "$dir"/*.tar.xz; do [ -e "$f" ] && { tar -C "$site" -xJf "$f" || return 1; }; done
  return 0
}
