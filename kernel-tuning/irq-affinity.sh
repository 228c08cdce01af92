#!/usr/bin/env bash
# kernel-tuning/irq-affinity.sh -- plan (and, only with --apply, set) NIC
# interrupt affinity so the network card's IRQs stay off the CPUs that run
# gatewayd workers, and show how to keep those CPUs for the workers.
#
# Default is a DRY RUN: it reads /proc/interrupts, /proc/irq/*/ and /sys and
# prints the plan and the commands it would run. Nothing is written unless
# --apply is given, and --apply is refused unless run as root.
#
# Usage: kernel-tuning/irq-affinity.sh [--iface IF] [--irq-cpus LIST] [--apply]
#   --iface IF       interface whose IRQs to move (default: the interface of
#                    the default route). IRQs are the /proc/interrupts lines
#                    naming IF, its bus device (virtioN, PCI address) or listed
#                    in the device's msi_irqs.
#   --irq-cpus LIST  CPUs for NIC interrupts and housekeeping, e.g. 0 or 0,16
#                    or 0-1 (default: chosen from the CPU count, see below).
#                    All other online CPUs are the worker CPUs.
#   --apply          write the plan to /proc/irq/N/smp_affinity_list (root).
#                    Not persistent: lost at reboot, and irqbalance may undo it.
#   -h, --help       this text
#
# Default split: <= 2 CPUs: no split (every CPU runs a worker; IRQs stay where
# they are). 3-16 CPUs: the first core (with its SMT siblings) of the NIC's
# NUMA node takes interrupts. More: one core per 16 CPUs.
#
# Exit: 0 plan printed (or applied), 1 --apply failed for some IRQ,
#       2 usage error or --apply refused.
#
# GATEWAYD_SYSROOT=DIR (testing only) reads and writes DIR/proc and DIR/sys
# instead of /proc and /sys.

set -u
export LC_ALL=C

R="${GATEWAYD_SYSROOT:-}"
iface=""
irq_cpus_arg=""
apply=0

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; }
die() { echo "irq-affinity.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --iface) [ $# -ge 2 ] || die "--iface needs a value"; iface="$2"; shift 2 ;;
        --iface=*) iface="${1#--iface=}"; shift ;;
        --irq-cpus) [ $# -ge 2 ] || die "--irq-cpus needs a value"; irq_cpus_arg="$2"; shift 2 ;;
        --irq-cpus=*) irq_cpus_arg="${1#--irq-cpus=}"; shift ;;
        --apply) apply=1; shift ;;
        --dry-run) apply=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument: $1 (try --help)" ;;
    esac
done

if [ "$apply" -eq 1 ] && [ "$(id -u)" -ne 0 ]; then
    die "refusing --apply: it writes /proc/irq/*/smp_affinity_list and needs root. Nothing was changed; run without --apply to see the plan."
fi

# ---------------------------------------------------------------- cpu lists
expand_list() { # "0-3,8" -> "0 1 2 3 8"
    local part a b out=""
    local IFS=,
    for part in $1; do
        part="${part//[[:space:]]/}"
        [ -n "$part" ] || continue
        if [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then
            a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
            while [ "$a" -le "$b" ]; do out="$out $a"; a=$((a + 1)); done
        elif [[ "$part" =~ ^[0-9]+$ ]]; then
            out="$out $part"
        else
            return 1
        fi
    done
    printf '%s' "${out# }"
}

compress_list() { # "0 1 2 3 8" -> "0-3,8" (input sorted or not)
    local sorted c start="" prev="" out=""
    sorted=$(printf '%s\n' "$@" | sort -n | uniq)
    for c in $sorted; do
        if [ -z "$start" ]; then start=$c; prev=$c
        elif [ "$c" -eq $((prev + 1)) ]; then prev=$c
        else
            if [ "$start" -eq "$prev" ]; then out="$out,$start"; else out="$out,$start-$prev"; fi
            start=$c; prev=$c
        fi
    done
    if [ -n "$start" ]; then
        if [ "$start" -eq "$prev" ]; then out="$out,$start"; else out="$out,$start-$prev"; fi
    fi
    printf '%s' "${out#,}"
}

in_list() { # needle haystack...
    local n="$1" x; shift
    for x in "$@"; do [ "$x" = "$n" ] && return 0; done
    return 1
}

online_raw=$(cat "$R/sys/devices/system/cpu/online" 2>/dev/null) || online_raw=""
if [ -z "$online_raw" ]; then
    n=$(nproc --all 2>/dev/null || echo 1)
    online_raw="0-$((n - 1))"
fi
read -r -a online <<<"$(expand_list "$online_raw")"
ncpu=${#online[@]}

siblings_of() { # cpu -> its SMT siblings (including itself)
    local f="$R/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list" s
    s=$(cat "$f" 2>/dev/null) || s="$1"
    expand_list "$s" || printf '%s' "$1"
}
smt="no"
if [ "$ncpu" -gt 0 ]; then
    read -r -a sib0 <<<"$(siblings_of "${online[0]}")"
    [ "${#sib0[@]}" -gt 1 ] && smt="yes (${#sib0[@]} threads per core)"
fi

# ---------------------------------------------------------------- interface
if [ -z "$iface" ]; then
    iface=$(awk 'NR > 1 && $2 == "00000000" { print $1; exit }' "$R/proc/net/route" 2>/dev/null)
fi
if [ -z "$iface" ]; then
    for d in "$R"/sys/class/net/*; do
        b=$(basename "$d")
        [ "$b" = lo ] || { iface="$b"; break; }
    done
fi
[ -n "$iface" ] || die "no network interface found; pass --iface"
[ -e "$R/sys/class/net/$iface" ] || die "no such interface: $iface"

dev=""
[ -e "$R/sys/class/net/$iface/device" ] && dev=$(readlink -f "$R/sys/class/net/$iface/device")
patterns=("$iface")
msi=()
numa_node=-1
driver="(virtual: no device)"
if [ -n "$dev" ]; then
    devname=$(basename "$dev")
    patterns+=("$devname")
    parent=$(dirname "$dev")
    pname=$(basename "$parent")
    [[ "$pname" =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$ ]] && patterns+=("$pname")
    for m in "$dev/msi_irqs" "$parent/msi_irqs"; do
        if [ -d "$m" ]; then
            for f in "$m"/*; do
                b=$(basename "$f")
                [[ "$b" =~ ^[0-9]+$ ]] && msi+=("$b")
            done
            break
        fi
    done
    numa_node=$(cat "$dev/numa_node" 2>/dev/null || cat "$parent/numa_node" 2>/dev/null || echo -1)
    if [ -e "$dev/driver" ]; then driver=$(basename "$(readlink -f "$dev/driver")")
    elif [ -e "$parent/driver" ]; then driver=$(basename "$(readlink -f "$parent/driver")")
    else driver="?"; fi
fi
rxq=$(find "$R/sys/class/net/$iface/queues" -maxdepth 1 -name 'rx-*' 2>/dev/null | wc -l)
txq=$(find "$R/sys/class/net/$iface/queues" -maxdepth 1 -name 'tx-*' 2>/dev/null | wc -l)

# IRQ numbers: /proc/interrupts lines naming the interface or its device,
# plus the device's msi_irqs.
regex=""
for p in "${patterns[@]}"; do
    q=$(printf '%s' "$p" | sed 's/[].[^$*+?(){}|\\/]/\\&/g')
    regex="${regex:+$regex|}$q"
done
declare -A irq_name=()
while IFS= read -r line; do
    num="${line%%:*}"; num="${num//[[:space:]]/}"
    [[ "$num" =~ ^[0-9]+$ ]] || continue
    name=$(printf '%s' "$line" | awk '{print $NF}')
    if printf '%s' "$line" | grep -Eq "(^|[^[:alnum:]_])($regex)([^[:alnum:]_]|$)"; then
        irq_name[$num]="$name"
    elif in_list "$num" "${msi[@]+"${msi[@]}"}"; then
        irq_name[$num]="$name"
    fi
done <"$R/proc/interrupts"
mapfile -t irqs < <(printf '%s\n' "${!irq_name[@]}" | grep -E '^[0-9]+$' | sort -n)

# ---------------------------------------------------------------- the split
node_cpus=()
if [ "$numa_node" -ge 0 ] 2>/dev/null; then
    nl=$(cat "$R/sys/devices/system/node/node$numa_node/cpulist" 2>/dev/null) && read -r -a node_cpus <<<"$(expand_list "$nl")"
fi
[ "${#node_cpus[@]}" -gt 0 ] || node_cpus=("${online[@]}")

hk=()
if [ -n "$irq_cpus_arg" ]; then
    ex=$(expand_list "$irq_cpus_arg") || die "--irq-cpus: not a CPU list: $irq_cpus_arg"
    read -r -a hk <<<"$ex"
    for c in "${hk[@]}"; do in_list "$c" "${online[@]}" || die "--irq-cpus: CPU $c is not online (online: $online_raw)"; done
    mode="given"
elif [ "$ncpu" -le 2 ]; then
    mode="shared"
else
    cores=1
    [ "$ncpu" -gt 16 ] && cores=$((ncpu / 16))
    taken=0
    for c in "${node_cpus[@]}"; do
        in_list "$c" "${online[@]}" || continue
        in_list "$c" "${hk[@]+"${hk[@]}"}" && continue
        read -r -a s <<<"$(siblings_of "$c")"
        for x in "${s[@]}"; do in_list "$x" "${online[@]}" && hk+=("$x"); done
        taken=$((taken + 1))
        [ "$taken" -ge "$cores" ] && break
    done
    mode="split"
fi

workers_cpus=()
if [ "$mode" != shared ]; then
    for c in "${online[@]}"; do in_list "$c" "${hk[@]}" || workers_cpus+=("$c"); done
    [ "${#workers_cpus[@]}" -gt 0 ] || die "--irq-cpus leaves no CPU for workers (online: $online_raw)"
    hk_list=$(compress_list "${hk[@]}")
    w_list=$(compress_list "${workers_cpus[@]}")
    nworkers=${#workers_cpus[@]}
else
    hk_list=$(compress_list "${online[@]}")
    w_list="$hk_list"
    nworkers=$ncpu
fi

# Planned affinity per IRQ: with several interrupt CPUs, one CPU per IRQ,
# round-robin, first threads of each core before their SMT siblings (a list
# like 8-9 would usually land every queue on its first CPU).
declare -A planned=()
if [ "$mode" != shared ]; then
    spread=()
    for c in "${hk[@]}"; do
        read -r -a s <<<"$(siblings_of "$c")"
        [ "${s[0]}" = "$c" ] && spread+=("$c")
    done
    for c in "${hk[@]}"; do in_list "$c" "${spread[@]+"${spread[@]}"}" || spread+=("$c"); done
    k=0
    for n in "${irqs[@]}"; do
        if [ "${#spread[@]}" -le 1 ]; then planned[$n]="$hk_list"
        else planned[$n]="${spread[$((k % ${#spread[@]}))]}"; fi
        k=$((k + 1))
    done
fi

# ---------------------------------------------------------------- report
irqbalance="not running"
if command -v pgrep >/dev/null 2>&1 && [ -z "$R" ] && pgrep -x irqbalance >/dev/null 2>&1; then irqbalance="RUNNING"; fi

if [ "$apply" -eq 1 ]; then echo "== irq-affinity.sh: APPLY (root) =="; else echo "== irq-affinity.sh: dry run (nothing is changed; --apply to set IRQ affinity) =="; fi
echo
echo "machine:    $ncpu online CPUs ($online_raw), SMT: $smt"
echo "interface:  $iface, driver $driver, ${rxq} rx / ${txq} tx queues, NUMA node $numa_node"
echo "irqbalance: $irqbalance"
echo
case "$mode" in
    shared)
        echo "plan: NO SPLIT. With $ncpu CPUs every CPU runs a worker (workers = 0 -> $ncpu)."
        echo "      IRQ affinity is left as it is; see the trade-offs below. To force a split"
        echo "      anyway (e.g. one worker on CPU 1, interrupts on CPU 0): --irq-cpus 0" ;;
    *)
        echo "plan: NIC interrupts + housekeeping on CPU(s) $hk_list; gatewayd workers on CPU(s) $w_list"
        echo "      ($nworkers worker(s); $([ "$mode" = given ] && echo "split given by --irq-cpus" || echo "default split for $ncpu CPUs"))" ;;
esac
echo

if [ "${#irqs[@]}" -eq 0 ]; then
    echo "IRQs: none found for $iface (a virtual or loopback interface, or a driver that names"
    echo "      its IRQs differently: look in /proc/interrupts and pass --iface)."
else
    printf '%-6s %-28s %-14s %-14s %s\n' IRQ NAME AFFINITY EFFECTIVE PLANNED
    for n in "${irqs[@]}"; do
        cur=$(cat "$R/proc/irq/$n/smp_affinity_list" 2>/dev/null || echo "?")
        eff=$(cat "$R/proc/irq/$n/effective_affinity_list" 2>/dev/null || echo "?")
        printf '%-6s %-28s %-14s %-14s %s\n' "$n" "${irq_name[$n]}" "$cur" "$eff" "${planned[$n]:-(unchanged)}"
    done
fi
echo

if [ "$mode" != shared ] && [ "${#irqs[@]}" -gt 0 ]; then
    echo "commands --apply runs (as root; not persistent across reboots):"
    for n in "${irqs[@]}"; do
        echo "  echo ${planned[$n]} > /proc/irq/$n/smp_affinity_list"
    done
    echo
fi

if [ "$mode" = shared ]; then
    cat <<EOF
keeping CPUs for the workers: not recommended with $ncpu CPUs (see the trade-offs).
  gatewayd already pins one worker per CPU; leave irqbalance and the kernel command
  line as they are. Run with --irq-cpus 0 to see the split commands anyway.

EOF
else
    cat <<EOF
keeping the worker CPUs for gatewayd (printed only; this script never changes these):
  1. gatewayd pins worker i to the i-th CPU of its affinity mask, so restrict the mask:
       systemd drop-in (/etc/systemd/system/gatewayd.service.d/cpu.conf):
         [Service]
         CPUAffinity=$w_list
       or from a shell:  taskset -c $w_list gatewayd run --workers $nworkers
     and set workers = $nworkers in the config (0 also works: one per CPU of the mask).
     The sidecar, admin and ingest threads inherit the mask and share the worker CPUs.
  2. keep everything else off them (optional): /etc/systemd/system.conf
       CPUAffinity=$hk_list
     (system services start there; gatewayd's own CPUAffinity= above overrides it)
  3. irqbalance would undo --apply: stop it, or in /etc/default/irqbalance
       IRQBALANCE_BANNED_CPULIST=$w_list
  4. boot-time isolation (optional, reboot, dedicated hosts only), kernel command line:
       isolcpus=managed_irq,domain,$w_list nohz_full=$w_list rcu_nocbs=$w_list irqaffinity=$hk_list
     e.g. in GRUB_CMDLINE_LINUX of /etc/default/grub, then update-grub and reboot.
     isolcpus=domain removes the CPUs from load balancing: only explicitly pinned threads
     (gatewayd's workers) spread over them; unpinned threads stay on the first CPU of
     their mask. nohz_full stops the tick on a CPU running one task but makes every
     syscall and io_uring_enter slightly dearer (context tracking): measure p99 and
     deliveries per CPU-second with and without it before keeping it.

EOF
fi
cat <<EOF
trade-offs:
  2 CPUs   Every CPU is a worker, so a split halves the workers to protect them from an
           interrupt load that is a small fraction of one core at 40k mostly idle
           sessions. The softirq work (TCP receive, ACKs) has to run somewhere anyway;
           moving it to the only other CPU makes that CPU the bottleneck and puts the OS,
           sidecar, admin and ingest there too. Default: no split, workers = 2, no
           isolcpus/nohz_full. If p99 matters more than throughput, try --irq-cpus 0
           (one worker on CPU 1) and compare with the benchmark, in one run.
  3-16     One core (with its SMT sibling, so no worker shares a physical core with
           interrupts) for IRQs and housekeeping costs 1/N of the workers and keeps
           softirq bursts (fan-out ACK storms, reconnect SYN storms) from preempting a
           worker in the middle of a batch. Usually worth it from 4 cores;
           on 3 it costs a third of the workers.
  many     One core per ~16 CPUs, on the NIC's NUMA node; spread the NIC queues
           (ethtool -L $iface combined N) over those cores only. Alternative for
           multi-queue NICs: aRFS (ethtool -K $iface ntuple on) steers each flow's
           interrupt to the CPU of the thread reading it -- cache-hot, the opposite
           strategy; measure both.
  single-queue NICs (like virtio with 1 rx queue) put all receive work on one CPU;
  RPS (/sys/class/net/$iface/queues/rx-0/rps_cpus) can spread it, at the cost of IPIs.
EOF

[ "$apply" -eq 1 ] || exit 0

# ---------------------------------------------------------------- apply
echo
if [ "$mode" = shared ]; then
    echo "apply: nothing to do -- with $ncpu CPUs the plan leaves IRQ affinity unchanged (use --irq-cpus to split)."
    exit 0
fi
if [ "${#irqs[@]}" -eq 0 ]; then
    echo "apply: no IRQs found for $iface; nothing changed."
    exit 0
fi
[ "$irqbalance" = RUNNING ] && echo "warning: irqbalance is running and may move these IRQs back (see step 3)."
failed=0
for n in "${irqs[@]}"; do
    f="$R/proc/irq/$n/smp_affinity_list"
    if { printf '%s\n' "${planned[$n]}" >"$f"; } 2>/dev/null; then
        echo "IRQ $n (${irq_name[$n]}): affinity set to ${planned[$n]}"
    else
        echo "IRQ $n (${irq_name[$n]}): could not set (kernel-managed IRQ or not permitted); left as $(cat "$f" 2>/dev/null || echo '?')"
        failed=$((failed + 1))
    fi
done
if [ "$failed" -gt 0 ]; then
    echo "apply: $failed IRQ(s) not changed"
    exit 1
fi
echo "apply: done (not persistent: reapply after reboot, e.g. from a oneshot unit)"
exit 0
