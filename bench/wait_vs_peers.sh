#!/usr/bin/env bash
# What a user waits for: wall clock from the command's start to its end (the last byte has
# arrived and been verified), across `tcptune emu` under this host's default buffer limits,
# each peer side by side in the same topology, repetitions interleaved, medians.
#
#   gridftp : 100 ms / 1 Gbit/s, 1 GiB memory to memory, the server sending (the download a
#             GridFTP user runs): tcptune auto on a path never seen (empty path database),
#             on a known path (warm database), kernel autotuning with 8 streams, and
#             globus-url-copy -p 1/4/8 from the distribution's GridFTP packages.
#   matrix  : 25/100/200 ms x 1/4/8 streams, 1 Gbit/s, 128 MiB (the paper's workload), the
#             client sending: auto on a new path, auto on a known path (careful resume),
#             kernel autotuning, and "ideal" = the best of fixed buffers of 1, 1.5 and 2 x
#             BDP/streams (forced past the system maxima), each timed from the command's
#             start; plus the physical limit (2 RTT of handshakes + size / goodput + RTT/2).
#   cp      : files, pushed from tmpfs in side a to tmpfs in side b, at CP_RTTS (default
#             "100 25") ms / 1 Gbit/s: a 1 GiB file of random bytes and a tree of 2,000 files
#             of 256 KiB: tcptune cp on a path never seen and on a known path, globus-url-copy
#             -p 1/4/8 (-pp for the tree; anonymous GridFTP server in side b) and with its own
#             best options (gcc: -cc 8 -fast -p 4 for the tree, -fast -p 4 for the file), with
#             integrity on (g4v: -p 4 -verify-checksum -checksum-alg SHA1, not in the default set), scp, rsync -W
#             over ssh and tcptune cp over ssh (sshd in side b, a key made for the run; the far
#             end `tcptune serve --stdio` is this same binary, started by ssh); user and system
#             CPU seconds of the client (with its ssh) beside the wall clock, which includes
#             ssh's own setup. CP_WHAT="file", "tree" or "pull" runs one of them (pull: the
#             file pulled from the server to side a, tools new known g1 g4 g8 gcc; GridFTP takes 8-9
#             minutes per tree at 100 ms); CP_TOOLS picks the tools (default all: "new known
#             g1 g4 g8 gcc scp rsync ssh"; the issue-21 comparison alone: CP_TOOLS="known ssh scp
#             rsync"). Every cp run is also one raw line of bench/raw/wait_cp.tsv (OUT_TSV).
#             Same buffer limits for every tool: `tcptune serve` runs without --force-buffers
#             in cp and gridftp, so neither end of tcptune exceeds the host's maxima, as
#             GridFTP, ssh, scp and rsync cannot (matrix keeps it: it compares tcptune's own
#             modes, and its "ideal" fixed buffers are forced past the maxima by definition).
#
# Needs root. Installs the GridFTP packages, openssh-server and rsync when missing (apt-get). Writes
# a quick look at this run's tables to $out/wait.md (WAIT_MD= elsewhere); the committed tables are
# bench/tables' (docs/bench/wait*.md from bench/raw/*.tsv: register a new OUT_TSV there).
# Usage: sudo bench/wait_vs_peers.sh [gridftp] [matrix] [cp]  (default: all three)
# Environment: REPS (default 3), TCPTUNE (default target/release/tcptune), SERVE_OPTS (cp:
# options of the running tcptune server, e.g. --careful-resume for pulls on a known path).
# The issue-21 rows alone, once, at 100 ms:
#   sudo CP_RTTS=100 CP_TOOLS="known ssh scp rsync" REPS=1 bench/wait_vs_peers.sh cp
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/emu_common.sh
source bench/emu_common.sh
need ip python3
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(gridftp matrix cp)
TCPTUNE=$(readlink -f "$TCPTUNE")
# The commit of the run, taken before this script writes its raw files (which would make
# every tree it measures look dirty).
RUN_COMMIT=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
# The raw line of every cp run (the cp part rewrites it).
OUT_TSV=$(readlink -f "${OUT_TSV:-bench/raw/wait_cp.tsv}")
# ... and of every gridftp-part run (the gridftp part rewrites it). bench/tables writes
# docs/bench/wait_NAME.md from every bench/raw/wait_NAME.tsv.
GRIDFTP_TSV=$(readlink -f "${GRIDFTP_TSV:-bench/raw/wait_gridftp.tsv}")

out=$(mktemp -d)
# Files live in tmpfs, so that the disk is not what is measured.
shm=$(mktemp -d -p /dev/shm)
NAME="wait$$"
HOSTS_TAG="# tcptune bench/wait_vs_peers.sh $$"
# The servers in side b (tcptune serve, sshd and what it starts, the GridFTP server) run in a
# cgroup of their own: its cpu.stat before and after a run is the server side's CPU.
SERVER_CG=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
if [ -n "$SERVER_CG" ] && mkdir "$SERVER_CG/tcptune-bench-$$" 2>/dev/null; then
    SERVER_CG="$SERVER_CG/tcptune-bench-$$"
else
    SERVER_CG=
fi
# to_server_cg PID: move a server (and what it starts from now on) into that cgroup.
to_server_cg() {
    [ -z "$SERVER_CG" ] || echo "$1" >"$SERVER_CG/cgroup.procs" 2>/dev/null || true
}
server_cpu_us() {
    if [ -n "$SERVER_CG" ]; then awk '$1 == "usage_usec" {print $2}' "$SERVER_CG/cpu.stat"; else echo nan; fi
}
# The ssh master of the sshcm runs, if one is open.
close_master() {
    [ -S "$out/ssh/cm" ] || return 0
    ip netns exec "$A" ssh -o ControlPath="$out/ssh/cm" -O exit "root@$PEER" >/dev/null 2>&1 || true
}
cleanup() {
    close_master
    "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true
    sed -i "/$HOSTS_TAG/d" /etc/hosts 2>/dev/null || true
    [ -n "${SSHD_PID:-}" ] && kill "$SSHD_PID" 2>/dev/null
    rm -rf "$out" "$shm"
    if [ -n "$SERVER_CG" ]; then
        xargs -r kill <"$SERVER_CG/cgroup.procs" 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$SERVER_CG" 2>/dev/null && break; sleep 0.3; done
    fi
}
trap cleanup EXIT INT TERM

A="tt-$NAME-a"
B="tt-$NAME-b"
PEER=198.19.0.1

# up RTT_MS [SERVE_OPTION...]: the emulated path (default limits: no sysctl changes) with a
# tcptune server in side b (matrix: --force-buffers; gridftp and cp: none, the host's limits).
up() {
    local rtt=$1; shift
    "$TCPTUNE" emu down "$NAME" >/dev/null 2>&1 || true
    "$TCPTUNE" emu up "$NAME" --rtt "${rtt}ms" --rate 1gbit >/dev/null
    mkdir -p "$shm/srv"
    # The GridFTP server writes as nobody: the way down to the shared folder must be open.
    chmod 755 "$shm" "$shm/srv"
    # Anonymous and writable, as the GridFTP server beside it (-aa): only side a reaches it.
    ip netns exec "$B" "$TCPTUNE" serve "$@" --no-path-db --root "$shm/srv" --allow-anonymous-writes \
        >/dev/null 2>&1 &
    to_server_cg $!
    sleep 0.5
}

# The GridFTP server in side b, anonymous, with the emulated addresses in /etc/hosts.
gridftp_server() {
    if ! command -v globus-url-copy >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y globus-gridftp-server-progs \
            globus-gass-copy-progs >/dev/null
    fi
    grep -q "$HOSTS_TAG" /etc/hosts ||
        printf '%s tcptune-emu-a %s\n%s tcptune-emu-b %s\n' 198.18.0.1 "$HOSTS_TAG" "$PEER" "$HOSTS_TAG" >>/etc/hosts
    ip netns exec "$B" globus-gridftp-server -aa -anonymous-user nobody -p 2811 \
        -control-interface "$PEER" -data-interface "$PEER" >/dev/null 2>&1 &
    to_server_cg $!
    sleep 1
}

# timed LABEL CMD...: run CMD in side a, append "LABEL seconds exitcode" to $out/times.
timed() {
    local label=$1; shift
    local t0 t1 rc=0 s0 s1
    s0=$(server_cpu_us)
    t0=$(date +%s%N)
    /usr/bin/time -o "$out/last.cpu" -f "%U %S" \
        ip netns exec "$A" "$@" >"$out/last.out" 2>"$out/last.err" || rc=$?
    t1=$(date +%s%N)
    # The far end of an ssh copy may still be exiting: let it finish before reading its CPU.
    sleep 0.3
    s1=$(server_cpu_us)
    echo "$label $(( (t1 - t0) / 1000 )) $rc $(tail -1 "$out/last.cpu" | awk '{print $1 + $2}') $(awk -v a="$s0" -v b="$s1" 'BEGIN {if (a == "nan") print "nan"; else printf "%.3f", (b - a) / 1e6}')" >>"$out/times"
    [ "$rc" = 0 ] || { echo "  $label failed ($rc): $(tail -1 "$out/last.err")" >&2; }
    if [ -s "$out/last.out" ] && head -c1 "$out/last.out" | grep -q '{'; then
        cp "$out/last.out" "$out/$label.$(wc -l <"$out/times").json"
    fi
}

# raw_row TSV PART CASE TOOL COMMIT OPTIONS REP BYTES: the last timed run as one raw line.
raw_row() {
    local _l us rc cpu scpu
    read -r _l us rc cpu scpu < <(tail -1 "$out/times")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$5" "$6" "$7" \
        "$(awk -v u="$us" 'BEGIN {printf "%.3f", u / 1e6}')" "$8" "${cpu:-nan}" "$rc" "${scpu:-nan}" >>"$1"
}

# The client's command (timed runs it inside side a, so it must be a program, not a function).
SEND=("$TCPTUNE" send "$PEER" --json --no-progress)

gridftp() {
    # What tcptune serve gets beyond the host's limits here (recorded in the raw file): nothing,
    # as the GridFTP server gets nothing (issue 22: the same host limits for every tool).
    local serve_opts=()
    up 100 "${serve_opts[@]}"
    gridftp_server
    local warm="$out/warm.sqlite" size=$((1 << 30))
    local commit opts
    commit=$RUN_COMMIT
    printf '# command: sudo REPS=%s bench/wait_vs_peers.sh gridftp\n' "$REPS" >"$GRIDFTP_TSV"
    printf '# serve_options: %s\n' "${serve_opts[*]:-none}" >>"$GRIDFTP_TSV"
    printf 'part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\tserver_cpu_s\n' >>"$GRIDFTP_TSV"
    timed warmup "${SEND[@]}" --tune auto -n 1024 -R --path-db "$warm"
    for rep in $(seq 1 "$REPS"); do
        local runs=(new known kernel8 g1 g4 g8)
        # Rotate the order so that no peer always runs first.
        local k=$(( rep % ${#runs[@]} ))
        runs=("${runs[@]:$k}" "${runs[@]:0:$k}")
        for r in "${runs[@]}"; do
            case $r in
                new) rm -f "$out/new.sqlite"*
                     opts="send --tune auto -n 1024 -R --path-db NEW (empty)"
                     timed gridftp.auto_new "${SEND[@]}" --tune auto -n 1024 -R --path-db "$out/new.sqlite" ;;
                known) opts="send --tune auto -n 1024 -R --path-db WARM"
                       timed gridftp.auto_known "${SEND[@]}" --tune auto -n 1024 -R --path-db "$warm" ;;
                kernel8) opts="send --tune kernel -P 8 -n 1024 -R --no-path-db"
                         timed gridftp.kernel_P8 "${SEND[@]}" --tune kernel -P 8 -n 1024 -R --no-path-db ;;
                g*) opts="globus-url-copy -p ${r#g} -len SIZE"
                    timed "gridftp.globus_p${r#g}" globus-url-copy -p "${r#g}" -len "$size" \
                        "ftp://tcptune-emu-b:2811/dev/zero" file:///dev/null ;;
            esac
            # The size asked for (the tools' outputs differ; a failed run has exit != 0).
            raw_row "$GRIDFTP_TSV" gridftp "100 ms download" "$r" "$commit" "$opts" "$rep" "$size"
        done
        echo "gridftp: repetition $rep of $REPS done" >&2
    done
}

matrix() {
    local size_mib=128
    for rtt in 25 100 200; do
        up "$rtt" --force-buffers
        local bdp=$(( 1000000000 / 8 * rtt / 1000 ))
        local warm="$out/warm$rtt.sqlite"
        for p in 1 4 8; do
            timed "warmup.$rtt.$p" "${SEND[@]}" --tune auto -P "$p" -n "$size_mib" --path-db "$warm"
        done
        for rep in $(seq 1 "$REPS"); do
            for p in 1 4 8; do
                local runs=(new known kernel f100 f150 f200)
                local k=$(( (rep + p) % ${#runs[@]} ))
                runs=("${runs[@]:$k}" "${runs[@]:0:$k}")
                for r in "${runs[@]}"; do
                    local tag="matrix.$rtt.$p"
                    case $r in
                        new) rm -f "$out/new.sqlite"*
                             timed "$tag.auto_new" "${SEND[@]}" --tune auto -P "$p" -n "$size_mib" --path-db "$out/new.sqlite" ;;
                        known) timed "$tag.auto_known" "${SEND[@]}" --tune auto -P "$p" -n "$size_mib" --path-db "$warm" ;;
                        kernel) timed "$tag.kernel" "${SEND[@]}" --tune kernel -P "$p" -n "$size_mib" --no-path-db ;;
                        f*) local pct=${r#f}
                            local per=$(( bdp * pct / 100 / p ))
                            timed "$tag.fixed$pct" "${SEND[@]}" --tune "fixed:$per" --force-buffers -P "$p" -n "$size_mib" --no-path-db ;;
                    esac
                done
            done
            echo "matrix: ${rtt} ms, repetition $rep of $REPS done" >&2
        done
    done
}


# An sshd in side b that takes a key made for this run (scp and rsync log in as root).
sshd_server() {
    if ! command -v sshd >/dev/null || ! command -v rsync >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y openssh-server rsync >/dev/null
    fi
    [ -n "${SSHD_PID:-}" ] && kill "$SSHD_PID" 2>/dev/null
    mkdir -p "$out/ssh" /run/sshd
    [ -f "$out/ssh/host" ] || ssh-keygen -q -t ed25519 -N '' -f "$out/ssh/host"
    [ -f "$out/ssh/user" ] || ssh-keygen -q -t ed25519 -N '' -f "$out/ssh/user"
    # The far end of tcptune cp over ssh: this binary, without a path database like the
    # running server in side b (and so not touching the host's ~/.cache/tcptune).
    printf '#!/bin/sh\nexec %q "$@" --no-path-db\n' "$TCPTUNE" >"$out/ssh/tcptune-far"
    chmod 755 "$out/ssh/tcptune-far"
    cat >"$out/ssh/sshd_config" <<CONF
Port 2222
ListenAddress $PEER
HostKey $out/ssh/host
AuthorizedKeysFile $out/ssh/user.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile none
Subsystem sftp /usr/lib/openssh/sftp-server
CONF
    ip netns exec "$B" /usr/sbin/sshd -D -f "$out/ssh/sshd_config" &
    SSHD_PID=$!
    to_server_cg "$SSHD_PID"
    sleep 0.5
}

# gopts_of KEY: a GridFTP tool key's options for one file (g4 -> -p 4; gcc -> -fast -p 4).
# g4v -> -p 4 with GridFTP's own end-to-end check: after the copy each end digests its file
# and the client compares (-verify-checksum), with SHA1, the cheapest digest its client takes
# here (MD5, the default, costs its client 2.5 x more; ADLER32 and CRC32 are refused).
gopts_of() {
    case $1 in
        gcc) echo "-fast -p 4" ;;
        g4v) echo "-verify-checksum -checksum-alg SHA1 -p 4" ;;
        *) echo "-p ${1#g}" ;;
    esac
}

cp_files() {
    local src="$shm/src" dst="$shm/srv/dst"
    printf '# command: sudo CP_RTTS="%s" CP_TOOLS="%s" CP_WHAT="%s" SERVE_OPTS="%s" REPS=%s bench/wait_vs_peers.sh cp\n' \
        "${CP_RTTS:-100 25}" "${CP_TOOLS:-}" "${CP_WHAT:-file tree}" "${SERVE_OPTS:-}" "$REPS" >"$OUT_TSV"
    printf 'part\tcase\ttool\tcommit\toptions\trep\tseconds\tbytes\tcpu_s\texit\tserver_cpu_s\n' >>"$OUT_TSV"
    local whats=${CP_WHAT:-file tree}
    mkdir -p "$src/tree"
    # CP_FILE_MIB / CP_TREE_FILES make a quick check of the script smaller (the table says so).
    head -c $(( ${CP_FILE_MIB:-1024} << 20 )) /dev/urandom >"$src/big"
    if [[ " $whats " == *" pull "* ]]; then
        mkdir -p "$shm/srv/pullsrc"; cp "$src/big" "$shm/srv/pullsrc/big"; chmod -R a+rX "$shm/srv/pullsrc"
    fi
    if [[ " $whats " == *" tree "* ]]; then
        for i in $(seq 1 "${CP_TREE_FILES:-2000}"); do head -c $((256 << 10)) /dev/urandom >"$src/tree/f$i"; done
    fi
    # No -p here: scp reads -p as "preserve" (its port is -P); ssh and rsync get -p 2222.
    local ssh_opts="-i $out/ssh/user -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
    local tools=${CP_TOOLS:-new known g1 g4 g8 gcc scp rsync ssh}
    # A running server is reached as tcptune://HOST/PATH since issue 21 (HOST:PATH is ssh
    # there); a binary from before keeps HOST:PATH.
    local srv="$PEER:"
    "$TCPTUNE" cp --help | grep -q 'tcptune://' && srv="tcptune://$PEER/"
    local commit
    commit=$RUN_COMMIT
    for rtt in ${CP_RTTS:-100 25}; do
        # SERVE_OPTS: options of the running tcptune server (e.g. --careful-resume), said in
        # the raw file's command line and in the options of the runs that reach it.
        # shellcheck disable=SC2086
        up "$rtt" ${SERVE_OPTS:-}
        [[ " $tools " != *" g"* ]] || gridftp_server
        sshd_server
        if [[ " $tools " == *" sshcm "* ]]; then
            # shellcheck disable=SC2086
            ip netns exec "$A" ssh $ssh_opts -p 2222 -o ControlMaster=yes -o ControlPath="$out/ssh/cm" \
                -o ControlPersist=3600 -N -f "root@$PEER"
        fi
        local warm="$out/cpwarm$rtt.sqlite"
        mkdir -p "$dst"; chmod 777 "$dst"
        timed "warmup.cp.$rtt" "$TCPTUNE" cp --json --path-db "$warm" "$src/big" "${srv}dst/big"
        if [[ " $whats " == *" pull "* ]]; then
            # The path database keeps each direction apart: a pull learns the way back.
            rm -rf "$shm/pulled"; mkdir -p "$shm/pulled"
            timed "warmup.cppull.$rtt" "$TCPTUNE" cp --json --path-db "$warm" "${srv}pullsrc/big" "$shm/pulled/big"
        fi
        for rep in $(seq 1 "$REPS"); do
            for what in $whats; do
                local runs
                read -r -a runs <<<"$tools"
                local k=$(( rep % ${#runs[@]} ))
                runs=("${runs[@]:$k}" "${runs[@]:0:$k}")
                for r in "${runs[@]}"; do
                    rm -rf "$dst"; mkdir -p "$dst"; chmod 777 "$dst"
                    local tag="cp.$rtt.$what.$r" s d opts
                    if [ "$what" = pull ]; then
                        # The same 1 GiB file pulled: from the server's share in side b to
                        # tmpfs in side a (the client receives, hashes and writes).
                        rm -rf "$shm/pulled"; mkdir -p "$shm/pulled"
                        s="$shm/srv/pullsrc/big"
                        case $r in
                            new) rm -f "$out/cpnew.sqlite"*
                                 opts="cp --json (new path db) ${srv}pullsrc/big DST"
                                 timed "$tag" "$TCPTUNE" cp --json --path-db "$out/cpnew.sqlite" "${srv}pullsrc/big" "$shm/pulled/big" ;;
                            known) opts="cp --json (warm path db) ${srv}pullsrc/big DST${SERVE_OPTS:+ (serve $SERVE_OPTS)}"
                                   timed "$tag" "$TCPTUNE" cp --json --path-db "$warm" "${srv}pullsrc/big" "$shm/pulled/big" ;;
                            g*) opts="globus-url-copy $(gopts_of "$r")"
                                # shellcheck disable=SC2046
                                timed "$tag" globus-url-copy $(gopts_of "$r") "ftp://tcptune-emu-b:2811$s" "file://$shm/pulled/big" ;;
                            *) echo "CP_WHAT=pull takes CP_TOOLS from: new known g1 g4 g8 gcc g4v" >&2; exit 2 ;;
                        esac
                        local want got
                        want=$(stat -c %s "$s")
                        got=$(stat -c %s "$shm/pulled/big" 2>/dev/null || echo 0)
                        [ "$want" = "$got" ] || echo "  $tag: copied $got of $want bytes" >&2
                        raw_row "$OUT_TSV" cp "$rtt ms $what" "$r" "$commit" "$opts" "$rep" "$got"
                        continue
                    fi
                    if [ "$what" = file ]; then s="$src/big"; else s="$src/tree"; fi
                    case $r in
                        new) rm -f "$out/cpnew.sqlite"*
                             opts="cp -r --json (new path db) SRC ${srv}dst/"
                             timed "$tag" "$TCPTUNE" cp -r --json --path-db "$out/cpnew.sqlite" "$s" "${srv}dst/" ;;
                        known) opts="cp -r --json (warm path db) SRC ${srv}dst/"
                               timed "$tag" "$TCPTUNE" cp -r --json --path-db "$warm" "$s" "${srv}dst/" ;;
                        # The far end is this binary, started by ssh (serve --stdio, no path
                        # database, as the server); the client's is the warm one, as for known.
                        ssh) opts="cp -r --json (warm path db) -e 'ssh -p 2222' --remote-tcptune 'TCPTUNE ... --no-path-db' SRC root@$PEER:DST/"
                             timed "$tag" "$TCPTUNE" cp -r --json --path-db "$warm" \
                                 -e "ssh $ssh_opts -p 2222" --remote-tcptune "$out/ssh/tcptune-far" "$s" "root@$PEER:$dst/" ;;
                        # The same, through an ssh connection the user already has open
                        # (ControlMaster, opened before the timed runs and not timed).
                        sshcm) opts="cp -r --json (warm path db) -e 'ssh -p 2222 -o ControlPath=CM' --remote-tcptune 'TCPTUNE ... --no-path-db' SRC root@$PEER:DST/"
                               timed "$tag" "$TCPTUNE" cp -r --json --path-db "$warm" \
                                   -e "ssh $ssh_opts -p 2222 -o ControlPath=$out/ssh/cm" --remote-tcptune "$out/ssh/tcptune-far" "$s" "root@$PEER:$dst/" ;;
                        # Over ssh with every block sealed (ChaCha20-Poly1305), as scp is.
                        sshenc) opts="cp -r --json --encrypt (warm path db) -e 'ssh -p 2222' --remote-tcptune 'TCPTUNE ... --no-path-db' SRC root@$PEER:DST/"
                                timed "$tag" "$TCPTUNE" cp -r --json --encrypt --path-db "$warm" \
                                    -e "ssh $ssh_opts -p 2222" --remote-tcptune "$out/ssh/tcptune-far" "$s" "root@$PEER:$dst/" ;;
                        # ssh's own setup alone: log in and run nothing (copies no byte).
                        sshtrue) opts="ssh -p 2222 HOST true"
                                 timed "$tag" ssh $ssh_opts -p 2222 "root@$PEER" true ;;
                        # GridFTP's own best options for many files: 8 files at once (-cc),
                        # mode E with data channels kept open between files (-fast), 4 streams.
                        gcc) opts="globus-url-copy -fast -p 4"
                             if [ "$what" = file ]; then
                                 timed "$tag" globus-url-copy -fast -p 4 "file://$s" "ftp://tcptune-emu-b:2811$dst/big"
                             else
                                 opts="globus-url-copy -r -cd -cc 8 -fast -p 4"
                                 timed "$tag" globus-url-copy -r -cd -cc 8 -fast -p 4 "file://$s/" "ftp://tcptune-emu-b:2811$dst/tree/"
                             fi ;;
                        # g1 g4 g8, and g4v (integrity on: each end's digest after the copy).
                        g*) opts="globus-url-copy $(gopts_of "$r")"
                            if [ "$what" = file ]; then
                                # shellcheck disable=SC2046
                                timed "$tag" globus-url-copy $(gopts_of "$r") "file://$s" "ftp://tcptune-emu-b:2811$dst/big"
                            else
                                opts="globus-url-copy -r -cd -pp $(gopts_of "$r")"
                                # shellcheck disable=SC2046
                                timed "$tag" globus-url-copy -r -cd -pp $(gopts_of "$r") "file://$s/" "ftp://tcptune-emu-b:2811$dst/tree/"
                            fi ;;
                        # shellcheck disable=SC2086
                        scp) opts="scp -r -q -P 2222"
                             timed "$tag" scp -r -q $ssh_opts -P 2222 "$s" "root@$PEER:$dst/" ;;
                        rsync) opts="rsync -a -W -e 'ssh -p 2222'"
                               timed "$tag" rsync -a -W -e "ssh $ssh_opts -p 2222" "$s" "root@$PEER:$dst/" ;;
                        *) echo "unknown CP_TOOLS entry: $r (new known g1 g4 g8 gcc g4v scp rsync ssh sshenc sshcm sshtrue)" >&2; exit 2 ;;
                    esac
                    # Every copy must be whole: compare sizes (the content is checked by
                    # each tool; tcptune cp by BLAKE3).
                    local want got
                    want=$(du -sb "$s" | cut -f1)
                    [ "$r" != sshtrue ] || want=0
                    got=$(du -sb "$dst/$(basename "$s")" 2>/dev/null | cut -f1 || echo 0)
                    [ "$want" = "$got" ] || echo "  $tag: copied $got of $want bytes" >&2
                    raw_row "$OUT_TSV" cp "$rtt ms $what" "$r" "$commit" "$opts" "$rep" "$got"
                done
            done
            echo "cp: ${rtt} ms, repetition $rep of $REPS done" >&2
        done
        close_master
        kill "$SSHD_PID" 2>/dev/null; SSHD_PID=
    done
}

for part in "${PARTS[@]}"; do
    case $part in
        gridftp) gridftp ;;
        matrix) matrix ;;
        cp) cp_files ;;
        *) echo "unknown part: $part (gridftp, matrix, cp)" >&2; exit 2 ;;
    esac
done

RAW_TSV=$(realpath --relative-to=. "$OUT_TSV") \
python3 - "$out" "$REPS" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY' | tee "${WAIT_MD:-$out/wait.md}"
import glob, json, os, statistics, sys
out, reps, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
times, cpu = {}, {}
for line in open(os.path.join(out, "times")):
    f = line.split()
    label, us, rc = f[0], f[1], f[2]
    if rc == "0":
        times.setdefault(label, []).append(int(us) / 1e6)
        if len(f) > 3:
            cpu.setdefault(label, []).append(float(f[3]))
def cmed(label):
    v = cpu.get(label)
    return statistics.median(v) if v else float("nan")
def med(label):
    v = times.get(label)
    return statistics.median(v) if v else float("nan")
def reports(label):
    for f in sorted(glob.glob(os.path.join(out, label + ".*.json"))):
        try:
            yield json.load(open(f))
        except Exception:
            pass
print("# What the user waits for, against the tools they would use instead\n")
print(f"`sudo bench/wait_vs_peers.sh` at commit {commit}, {reps} repetitions interleaved; "
      "wall clock from the command's start to its end, median in seconds, across `tcptune emu` "
      "at 1 Gbit/s under this host's default buffer limits (4 MiB maxima). The machine has 2 "
      "shared vCPUs: compare within a table, not across runs.\n")
if any(k.startswith("gridftp.") for k in times):
    print("## 1 GiB, 100 ms, the server sending\n")
    print("| tool | seconds | CPU s | vs tcptune on a new path |")
    print("| --- | ---: | ---: | ---: |")
    base = med("gridftp.auto_new")
    for label, name in [("gridftp.auto_new", "tcptune auto, path never seen"),
                        ("gridftp.auto_known", "tcptune auto, known path"),
                        ("gridftp.kernel_P8", "tcptune, kernel autotuning, 8 streams"),
                        ("gridftp.globus_p1", "globus-url-copy -p 1"),
                        ("gridftp.globus_p4", "globus-url-copy -p 4"),
                        ("gridftp.globus_p8", "globus-url-copy -p 8")]:
        m = med(label)
        print(f"| {name} | {m:.2f} | {cmed(label):.2f} | {m / base:.2f} |")
    print()
rows = sorted({tuple(k.split(".")[1:3]) for k in times if k.startswith("matrix.")},
              key=lambda t: (int(t[0]), int(t[1])))
if rows:
    print("## 128 MiB, the client sending\n")
    print("`ideal` is the fastest of fixed buffers of 1, 1.5 and 2 x BDP per stream set with "
          "--force-buffers, timed like the others; `limit` is the physical limit "
          "(2 RTT of handshakes + 128 MiB / 965 Mbit/s + RTT/2). Streams: what auto used "
          "(median).\n")
    print("| RTT | -P | auto new | auto known | kernel | ideal | limit | new / ideal | new / kernel | known / limit | auto streams | known: resume |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for rtt, p in rows:
        tag = f"matrix.{rtt}.{p}"
        new, known, kern = med(tag + ".auto_new"), med(tag + ".auto_known"), med(tag + ".kernel")
        fixed = {pct: med(f"{tag}.fixed{pct}") for pct in (100, 150, 200)}
        best = min(fixed.values())
        r = int(rtt) / 1000
        limit = 2 * r + 128 * 2**20 * 8 / 965e6 + r / 2
        streams = [len(x["end"]["tcptune"]["streams"]) for x in reports(tag + ".auto_new")]
        resumed = [x["start"]["tcptune"].get("resume") or {} for x in reports(tag + ".auto_known")]
        used = sum(1 for x in resumed if x.get("used"))
        why = next((x.get("why_not") for x in resumed if x.get("why_not")), "")
        print(f"| {rtt} ms | {p} | {new:.2f} | {known:.2f} | {kern:.2f} | {best:.2f} | {limit:.2f} | "
              f"{new / best:.2f} | {new / kern:.2f} | {known / limit:.2f} | "
              f"{statistics.median(streams) if streams else float('nan'):.0f} | "
              f"{used}/{len(resumed)}{(' (' + why + ')') if why else ''} |")
    print()
cps = sorted({(k.split(".")[1], k.split(".")[2]) for k in times if k.startswith("cp.")},
             key=lambda t: (-int(t[0]), t[1]))
if cps:
    print("## Files: tcptune cp against GridFTP, scp and rsync\n")
    print("Pushed from tmpfs in side a to tmpfs in side b (the disk is not measured): `file` is "
          "1 GiB of random bytes, `tree` 2,000 files of 256 KiB (500 MiB). Seconds from the "
          "command's start to its end (for the tools over ssh, ssh's own setup included); CPU "
          "is the client's user + system seconds (with the ssh it runs). `tcptune serve` runs "
          "without --force-buffers here: every tool is under the host's buffer limits. Raw "
          "runs: `" + os.environ.get("RAW_TSV", "bench/raw/wait_cp.tsv") + "`.\n")
    names = [("new", "tcptune cp, path never seen"), ("known", "tcptune cp, known path"),
             ("ssh", "tcptune cp over ssh (-e ssh, far end serve --stdio), known path"),
             ("sshcm", "tcptune cp over an ssh connection already open (ControlMaster), known path"),
             ("sshtrue", "ssh HOST true (ssh's own setup, copies nothing)"),
             ("g1", "globus-url-copy -p 1"), ("g4", "globus-url-copy -p 4"),
             ("g8", "globus-url-copy -p 8"),
             ("g4v", "globus-url-copy -p 4 -verify-checksum -checksum-alg SHA1"),
             ("scp", "scp"), ("rsync", "rsync -a -W over ssh")]
    nan = float("nan")
    for rtt, what in cps:
        tag = f"cp.{rtt}.{what}"
        base_key = "new" if tag + ".new" in times else "known"
        base = med(f"{tag}.{base_key}")
        print(f"### {what}, {rtt} ms\n")
        size = (int(os.environ.get("CP_FILE_MIB", "1024")) * 2**20 if what == "file"
                else int(os.environ.get("CP_TREE_FILES", "2000")) * 256 * 1024)
        if size not in (2**30, 2000 * 256 * 1024):
            print(f"Not the benchmark's sizes: {size} bytes (CP_FILE_MIB, CP_TREE_FILES).\n")
        print(f"| tool | seconds | CPU s | vs tcptune {base_key} | goodput | runs |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for key, name in names:
            if f"{tag}.{key}" not in times:
                continue
            m = med(f"{tag}.{key}")
            gp = "-" if key == "sshtrue" else f"{size * 8 / m / 1e6:.0f} Mbit/s"
            print(f"| {name} | {m:.2f} | {cmed(f'{tag}.{key}'):.2f} | {m / base:.2f} | "
                  f"{gp} | {len(times.get(f'{tag}.{key}', []))} |")
        gs = [med(tag + ".g" + n) for n in "148" if f"{tag}.g{n}" in times]
        if gs and tag + ".new" in times:
            print(f"\ntcptune cp on a new path / best GridFTP: **{base / min(gs):.2f}** "
                  f"(below 1: tcptune faster)")
        if tag + ".ssh" in times:
            ssh = med(tag + ".ssh")
            server = med(tag + ".known") if tag + ".known" in times else nan
            scp = med(tag + ".scp") if tag + ".scp" in times else nan
            rsync = med(tag + ".rsync") if tag + ".rsync" in times else nan
            print(f"\nOver ssh / against a running server (both on the known path): "
                  f"**{ssh / server:.2f}** (target <= 1.10); scp / over ssh: **{scp / ssh:.2f}**"
                  f"{' (target >= 4)' if what == 'file' else ''}; rsync -W / over ssh: "
                  f"**{rsync / ssh:.2f}**")
            if tag + ".sshcm" in times:
                print(f"\nOver an ssh connection already open / against a running server: "
                      f"**{med(tag + '.sshcm') / server:.2f}** (target <= 1.10)")
            if tag + ".sshtrue" in times:
                print(f"\nssh's own setup (`ssh HOST true`) is {med(tag + '.sshtrue'):.2f} s, "
                      f"{med(tag + '.sshtrue') / server:.2f} of the running server's whole copy: "
                      f"the floor of any tool started over a new ssh connection")
        print()
failed = [l.split()[0] for l in open(os.path.join(out, "times")) if l.split()[2] != "0"]
if failed:
    print(f"Failed runs ({len(failed)}): " + ", ".join(sorted(set(failed))) + "\n")
PY
cp "$out/times" "${WAIT_MD:-$out/wait.md}.times"
# The committed tables are bench/tables' (every bench/raw/wait_NAME.tsv gives docs/bench/
# wait_NAME.md); the table above is this run's quick look (the matrix part has no raw file).
if [[ " ${PARTS[*]} " == *" cp "* || " ${PARTS[*]} " == *" gridftp "* ]]; then
    python3 bench/tables
fi
