# shellcheck shell=bash
# show_help_if_asked SCRIPT [FIRST_ARG]: when FIRST_ARG is -h or --help, print SCRIPT's header (the comment block
# under its shebang: what it does, its usage, its settings) and exit 0. Every script in scripts/ calls it first,
# so `--help` never starts anything.
show_help_if_asked() {
  case ${2:-} in
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
      exit 0
      ;;
  esac
}
