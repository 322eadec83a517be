# shellcheck shell=bash
# load_env_file FILE: export KEY=VALUE lines of a .env file into the shell. Variables already set in the
# environment win (the same rule as common.env.load_dotenv). Blank lines, '#' comments, an optional
# 'export ' prefix and one pair of surrounding quotes are accepted; anything else stops with a message.
load_env_file() {
  local file=$1 line key value lineno=0
  [ -f "$file" ] || return 0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line#"${line%%[![:space:]]*}"}
    [[ -z $line || $line == \#* ]] && continue
    line=${line#export }
    if [[ $line != *=* ]]; then
      printf 'ERROR: %s:%d: expected KEY=VALUE, got %q\n' "$file" "$lineno" "$line" >&2
      return 2
    fi
    key=${line%%=*}; key=${key%"${key##*[![:space:]]}"}
    value=${line#*=}; value=${value#"${value%%[![:space:]]*}"}; value=${value%"${value##*[![:space:]]}"}
    if [[ ${#value} -ge 2 && ( $value == \"*\" || $value == \'*\' ) ]]; then value=${value:1:-1}; fi
    if [[ ! $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      printf 'ERROR: %s:%d: %q is not a variable name\n' "$file" "$lineno" "$key" >&2
      return 2
    fi
    if [ -z "${!key+x}" ]; then export "$key=$value"; fi
  done <"$file"
}
