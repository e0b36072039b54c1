#!/usr/bin/env bash
# Proves the container image builds from its build context, without a Docker engine.
#
# Reads the Dockerfile's builder stage and replays it in a scratch directory that holds only what
# the stage COPYs out of the build context (the working tree's files that git does not ignore,
# minus .dockerignore): the dummy-main dependency build, then the crate's own build, with the
# stage's ENV (SQLX_OFFLINE=true). A file the build needs but the Dockerfile does not copy (or
# copies too late, or .dockerignore leaves out) fails here as it would in `docker build`.
# Finally it checks that what the other stages take from the builder (`COPY --from=builder`) exists.
#
# Anything in the builder stage the script does not understand fails loudly rather than being
# skipped: COPY flags other than --chown/--chmod/--link, JSON or heredoc forms, wildcards,
# variables, --from inside the builder stage; RUN commands other than mkdir/echo/touch/rm/cargo
# build, absolute or parent paths in RUN; instructions other than FROM/WORKDIR/ENV/COPY/RUN
# (LABEL and EXPOSE are ignored).
#
#   .ci/docker-context.sh
#
# Cold, it is a release build of every dependency (about 12 CPU-minutes: 6 min on two idle cores,
# 25 min on two busy ones); warm, about a minute (the binary is rebuilt, as in the image).
#
# The cargo target directory persists (DOCKER_CONTEXT_TARGET_DIR, default target/docker-context,
# which /target in .gitignore covers) so that reruns are warm. The base image's toolchain is not
# reproduced: this uses the machine's cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dockerfile=${DOCKERFILE:-Dockerfile}
stage=${DOCKER_STAGE:-builder}
target_dir=${DOCKER_CONTEXT_TARGET_DIR:-$root/target/docker-context}
started=$SECONDS

die() {
  echo "docker-context: $*" >&2
  exit 1
}

# --- the Dockerfile as instructions: continuations joined, comments dropped ------------------------
instructions=()
current=""
while IFS= read -r line || [[ -n $line ]]; do
  if [[ $line =~ ^[[:space:]]*#[[:space:]]*escape[[:space:]]*= && ${#instructions[@]} -eq 0 && -z $current ]]; then
    die "$dockerfile changes the escape character; this script only knows '\\'"
  fi
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  if [[ $line =~ ^(.*)\\[[:space:]]*$ ]]; then
    current+="${BASH_REMATCH[1]} "
    continue
  fi
  current+=$line
  instructions+=("$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$current")")
  current=""
done <"$dockerfile"
[[ -z $current ]] || die "$dockerfile ends inside a line continuation"

# --- the build context: files git would commit, minus .dockerignore -------------------------------
# .dockerignore patterns are relative to the context root (`*.log` matches only there, `**` any
# depth); a pattern matching a folder leaves out everything under it; `!` re-includes; the last
# matching pattern decides.
ignore_regexes=()
ignore_negated=()
if [[ -f .dockerignore ]]; then
  while IFS= read -r pattern || [[ -n $pattern ]]; do
    pattern=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$pattern")
    [[ -z $pattern || $pattern == \#* ]] && continue
    negated=0
    if [[ $pattern == !* ]]; then
      negated=1
      pattern=${pattern#!}
    fi
    pattern=${pattern#/}
    pattern=${pattern#./}
    pattern=${pattern%/}
    regex=""
    i=0
    while ((i < ${#pattern})); do
      c=${pattern:i:1}
      if [[ ${pattern:i:3} == "**/" ]]; then
        regex+="(.*/)?"
        ((i += 3))
        continue
      elif [[ ${pattern:i:2} == "**" ]]; then
        regex+=".*"
        ((i += 2))
        continue
      fi
      case $c in
        '*') regex+="[^/]*" ;;
        '?') regex+="[^/]" ;;
        '[' | ']') die ".dockerignore pattern '$pattern' uses a character class; teach this script" ;;
        [.+\(\)\{\}\|^\$]) regex+="\\$c" ;;
        '\') die ".dockerignore pattern '$pattern' uses an escape; teach this script" ;;
        *) regex+=$c ;;
      esac
      ((i += 1))
    done
    ignore_regexes+=("^${regex}$")
    ignore_negated+=("$negated")
  done <.dockerignore
fi

dockerignored() {
  local path=$1 excluded=0 i prefix
  for i in "${!ignore_regexes[@]}"; do
    prefix=$path
    while :; do
      if [[ $prefix =~ ${ignore_regexes[i]} ]]; then
        excluded=$((1 - ignore_negated[i]))
        break
      fi
      [[ $prefix == */* ]] || break
      prefix=${prefix%/*}
    done
  done
  ((excluded))
}

context=()
while IFS= read -r file; do
  [[ -e $file ]] || continue # deleted in the working tree, not yet in the index
  dockerignored "$file" || context+=("$file")
done < <(git ls-files --cached --others --exclude-standard)
echo "docker-context: build context: ${#context[@]} files (git's, less .dockerignore)"

# --- replay the builder stage ---------------------------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/docker-context.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$target_dir"

build_env=(
  # What the builder's WORKDIR/target is here. The host's database and flags stay out of it, as
  # they are out of the image build.
  "CARGO_TARGET_DIR=$target_dir"
)
workdir=""

# A COPY's destination inside the scratch directory (which stands for WORKDIR).
destination() {
  local dest=$1
  if [[ $dest == /* ]]; then
    [[ -n $workdir && ($dest == "$workdir" || $dest == "$workdir"/*) ]] ||
      die "COPY to $dest, outside the WORKDIR ($workdir); teach this script"
    dest=${dest#"$workdir"}
    dest=${dest#/}
  fi
  [[ $dest != *..* ]] || die "COPY to $dest: parent paths are not understood"
  dest=${dest#./}
  [[ $dest == . ]] && dest=""
  printf '%s' "$dest"
}

# Copies the sources of a COPY from the context; with a scratch directory, into it, else only
# checks that they are there.
copy_from_context() {
  local into=$1
  shift
  local words=("$@") sources dest n source file rel target found
  ((${#words[@]} >= 2)) || die "COPY needs a source and a destination: COPY ${words[*]}"
  dest=${words[-1]}
  sources=("${words[@]:0:${#words[@]}-1}")
  n=${#sources[@]}
  if ((n > 1)) && [[ $dest != */ ]]; then
    die "COPY of several sources needs a destination ending in /: COPY ${words[*]}"
  fi
  local dest_path=""
  [[ -n $into ]] && dest_path=$(destination "$dest")
  for source in "${sources[@]}"; do
    [[ $source != *[\*\?\[]* ]] || die "COPY source '$source' has a wildcard; teach this script"
    [[ $source != /* && $source != *..* ]] || die "COPY source '$source' is outside the context"
    source=${source#./}
    source=${source%/}
    [[ -z $source ]] && source=.
    found=0
    for file in "${context[@]}"; do
      if [[ $source == . ]]; then
        rel=$file
      elif [[ $file == "$source" ]]; then
        # A single file: to dest/name when dest is a folder, else to dest itself.
        if [[ $dest == */ || $dest == . || $dest == ./ || -d "$into/$dest_path" ]]; then
          rel=${file##*/}
        else
          rel=""
        fi
      elif [[ $file == "$source"/* ]]; then
        rel=${file#"$source"/}
      else
        continue
      fi
      found=1
      [[ -n $into ]] || continue
      if [[ -z $rel ]]; then
        target="$into/$dest_path"
      else
        target="$into/${dest_path:+$dest_path/}$rel"
      fi
      mkdir -p "$(dirname "$target")"
      cp -p "$file" "$target"
    done
    ((found)) || die "COPY $source: not in the build context (missing, untracked and ignored, or .dockerignored)"
  done
}

in_stage=""
builds=0
from_builder=()
for instruction in "${instructions[@]}"; do
  keyword=${instruction%%[[:space:]]*}
  keyword=${keyword^^}
  rest=${instruction#*[[:space:]]}
  [[ $rest == "$instruction" ]] && rest=""
  rest=$(sed -E 's/^[[:space:]]+//' <<<"$rest")

  if [[ $keyword == FROM ]]; then
    name=""
    if [[ $rest =~ [[:space:]][Aa][Ss][[:space:]]+([^[:space:]]+)$ ]]; then
      name=${BASH_REMATCH[1]}
    fi
    in_stage=$name
    continue
  fi

  if [[ $in_stage != "$stage" ]]; then
    # Other stages: what they take from the builder must exist afterwards, and what they take
    # from the context must be in it.
    if [[ $keyword == COPY ]]; then
      read -ra words <<<"$rest"
      if [[ ${words[0]} == --from=* ]]; then
        [[ ${words[0]} == "--from=$stage" ]] && from_builder+=("${words[1]}")
      else
        plain=()
        for w in "${words[@]}"; do [[ $w == --* ]] || plain+=("$w"); done
        copy_from_context "" "${plain[@]}"
      fi
    fi
    continue
  fi

  case $keyword in
    WORKDIR)
      [[ -z $workdir ]] || die "a second WORKDIR ($rest) in the $stage stage; teach this script"
      [[ $rest == /* ]] || die "WORKDIR $rest is not absolute; teach this script"
      workdir=${rest%/}
      ;;
    ENV)
      env_rest=$rest
      while [[ -n $env_rest ]]; do
        if [[ $env_rest =~ ^([A-Za-z_][A-Za-z0-9_]*)=(\"([^\"\\$]*)\"|([^[:space:]\"\'\\$]*))[[:space:]]*(.*)$ ]]; then
          build_env+=("${BASH_REMATCH[1]}=${BASH_REMATCH[3]}${BASH_REMATCH[4]}")
          echo "docker-context: ENV ${BASH_REMATCH[1]}=${BASH_REMATCH[3]}${BASH_REMATCH[4]}"
          env_rest=${BASH_REMATCH[5]}
        else
          die "ENV form not understood (use KEY=value pairs): ENV $rest"
        fi
      done
      ;;
    COPY)
      [[ $rest != \[* && $rest != *"<<"* ]] || die "COPY form not understood (JSON or heredoc): COPY $rest"
      [[ $rest != *'$'* ]] || die "COPY with a variable is not understood: COPY $rest"
      read -ra words <<<"$rest"
      plain=()
      for w in "${words[@]}"; do
        case $w in
          --chown=* | --chmod=* | --link | --link=*) ;; # ownership, mode, layering: same files
          --*) die "COPY flag $w is not understood (in the $stage stage): COPY $rest" ;;
          *) plain+=("$w") ;;
        esac
      done
      echo "docker-context: COPY ${plain[*]}"
      copy_from_context "$scratch" "${plain[@]}"
      ;;
    RUN)
      [[ $rest != \[* && $rest != --* && $rest != *"<<"* ]] ||
        die "RUN form not understood (JSON, flags or heredoc): RUN $rest"
      IFS=$'\n' read -r -d '' -a commands < <(sed 's/&&/\n/g' <<<"$rest" && printf '\0')
      for command in "${commands[@]}"; do
        command=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$command")
        [[ -z $command ]] && continue
        [[ $command != *[\;\|\`]* && $command != *'$('* ]] ||
          die "RUN with ; | or command substitution is not understood: $command"
        read -ra words <<<"$command"
        for w in "${words[@]}"; do
          [[ $w != /* && $w != *..* && $w != \~* ]] || die "RUN with an absolute or parent path ($w): $command"
        done
        case ${words[0]} in
          mkdir | echo | touch | rm) ;;
          cargo) [[ ${words[1]:-} == build ]] || die "RUN cargo ${words[1]:-}: only cargo build is understood" ;;
          *) die "RUN ${words[0]} is not understood (mkdir, echo, touch, rm, cargo build): $command" ;;
        esac
        [[ ${words[0]} != cargo ]] || builds=$((builds + 1))
      done
      echo "docker-context: RUN $rest"
      step=$SECONDS
      (cd "$scratch" && env -u DATABASE_URL -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS "${build_env[@]}" sh -c "$rest") ||
        die "RUN failed: $rest"
      echo "docker-context: RUN took $((SECONDS - step)) s"
      ;;
    LABEL | EXPOSE) ;;
    *) die "$keyword is not understood in the $stage stage; teach this script" ;;
  esac
done

[[ -n $workdir ]] || die "no stage named $stage (or it has no WORKDIR) in $dockerfile"
((builds > 0)) || die "the $stage stage never runs cargo build"

# What the image takes from the builder exists (target/ is CARGO_TARGET_DIR here).
for path in "${from_builder[@]}"; do
  case $path in
    "$workdir"/target/*) here="$target_dir/${path#"$workdir"/target/}" ;;
    "$workdir"/*) here="$scratch/${path#"$workdir"/}" ;;
    *) die "COPY --from=$stage $path: outside the WORKDIR; teach this script" ;;
  esac
  [[ -e $here ]] || die "the image copies $path from the $stage stage, which did not produce it"
  echo "docker-context: the $stage stage produced $path"
done

echo "docker-context: ok in $((SECONDS - started)) s"
