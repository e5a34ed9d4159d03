# Integration test of `keel doctor`: exit codes, JSON shape, the fix script
# (valid sh, never run), a missing data folder failing, a fake /proc + /sys
# tree (KEEL_DOCTOR_ROOT) with fake nvcc and nvidia-smi on PATH, and the
# runtime when no GPU tools are present.
. "$KEEL_SRC/tests/integration/lib.sh"

expect_rc doctor_help 0 "$KEEL" doctor --help
grep -q -- '--data-dir' "$T/out" && pass doctor_help_lists_options || fail doctor_help_lists_options "no --data-dir in help"
expect_rc doctor_bogus_option 2 "$KEEL" doctor --bogus
expect_rc doctor_json_and_script 2 "$KEEL" doctor --json --fix-script
expect_rc doctor_extra_argument 2 "$KEEL" doctor extra

# --json on this machine: exit 0 or 1, parses, >= 12 checks with 6 string fields
"$KEEL" doctor --json > "$T/doctor.json" 2> "$T/doctor.err"; rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; then pass doctor_json_exit; else fail doctor_json_exit "exit $rc: $(head -c 300 "$T/doctor.err")"; fi
check doctor_json_shape "$PYTHON" - "$T/doctor.json" "$rc" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
checks = d["checks"]
assert len(checks) >= 12, len(checks)
ids = set()
for c in checks:
    for f in ("id", "status", "observed", "recommended", "why", "fix"):
        assert isinstance(c.get(f), str), (c.get("id"), f)
    assert c["status"] in ("pass", "warn", "fail", "info"), c
    assert c["id"] and c["why"], c
    assert c["id"] not in ids, c["id"]
    ids.add(c["id"])
for want in ("kernel.swappiness", "kernel.overcommit_memory", "kernel.thp", "net.somaxconn",
             "net.tcp_max_syn_backlog", "limits.nofile", "shm", "memory.total", "memory.swap",
             "disk.data_dir", "disk.free", "disk.mount", "cpu.model", "cpu.simd", "cpu.governor",
             "clock.sync", "gpu.driver", "gpu.cuda", "gpu.memory"):
    assert want in ids, want
s = d["summary"]
for k in ("pass", "warn", "fail", "info"):
    assert s[k] == sum(1 for c in checks if c["status"] == k), k
assert (s["fail"] > 0) == (sys.argv[2] == "1"), ("exit status and fails disagree", s, sys.argv[2])
EOF

# text output: a table and a summary; no line starts with PASS/FAIL
"$KEEL" doctor > "$T/doctor.txt" 2>&1
if grep -q '^  STATUS  CHECK' "$T/doctor.txt" && grep -Eq '^[0-9]+ checks: [0-9]+ pass, [0-9]+ warn, [0-9]+ fail, [0-9]+ info$' "$T/doctor.txt" \
   && ! grep -Eq '^(PASS|FAIL) ' "$T/doctor.txt" && ! grep -q $'\033' "$T/doctor.txt"; then
  pass doctor_text_table
else
  fail doctor_text_table "$(head -c 400 "$T/doctor.txt")"
fi

# fix script: shebang, valid sh
"$KEEL" doctor --fix-script > "$T/fix.sh" 2> "$T/fix.err"
if head -1 "$T/fix.sh" | grep -qx '#!/bin/sh' && sh -n "$T/fix.sh"; then pass doctor_fix_script_sh; else fail doctor_fix_script_sh "$(head -c 400 "$T/fix.sh")"; fi

# a missing data folder fails (exit 1) with a mkdir fix
expect_rc doctor_missing_data_dir 1 "$KEEL" doctor --json --data-dir /nonexistent/keel-doctor-test
check doctor_missing_data_dir_check "$PYTHON" -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = [c for c in d["checks"] if c["id"] == "disk.data_dir"][0]
assert c["status"] == "fail", c
assert "mkdir -p" in c["fix"], c
assert d["summary"]["fail"] >= 1
' "$T/out"
: > "$T/afile"
expect_rc doctor_data_dir_is_file 1 "$KEEL" doctor --data-dir "$T/afile"

# fake /proc + /sys tree and fake GPU tools
R="$T/root"; B="$T/bin"
mkdir -p "$R/proc/sys/vm" "$R/proc/sys/net/core" "$R/proc/sys/net/ipv4" "$R/proc/self" "$R/proc/driver/nvidia" \
         "$R/sys/kernel/mm/transparent_hugepage" "$R/sys/devices/system/cpu/cpu0/cpufreq" "$R/dev/shm" "$B" "$T/data"
echo 5 > "$R/proc/sys/vm/swappiness"
echo 0 > "$R/proc/sys/vm/overcommit_memory"
echo 'always [madvise] never' > "$R/sys/kernel/mm/transparent_hugepage/enabled"
echo 128 > "$R/proc/sys/net/core/somaxconn"
echo 4096 > "$R/proc/sys/net/ipv4/tcp_max_syn_backlog"
echo performance > "$R/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
printf 'MemTotal: 65536000 kB\nMemAvailable: 60000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n' > "$R/proc/meminfo"
printf 'processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: sse2 avx fma avx2 f16c\n' > "$R/proc/cpuinfo"
echo '26 1 8:1 / / rw,noatime - ext4 /dev/fake rw' > "$R/proc/self/mountinfo"
echo 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023' > "$R/proc/driver/nvidia/version"
printf '#!/bin/sh\necho "Cuda compilation tools, release 12.4, V12.4.131"\n' > "$B/nvcc"
printf '#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 81559 MiB, 75000 MiB"\necho "NVIDIA H100 80GB HBM3, 81559 MiB, 0 MiB"\n' > "$B/nvidia-smi"
chmod +x "$B/nvcc" "$B/nvidia-smi"
KEEL_DOCTOR_ROOT="$R" PATH="$B:/usr/bin:/bin" "$KEEL" doctor --json --data-dir "$T/data" > "$T/fake.json" 2> "$T/fake.err"
check doctor_fake_root "$PYTHON" - "$T/fake.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
st = {c["id"]: c for c in d["checks"]}
want = {"kernel.swappiness": "pass", "kernel.overcommit_memory": "pass", "kernel.thp": "pass",
        "net.somaxconn": "warn", "net.tcp_max_syn_backlog": "pass", "memory.total": "pass",
        "memory.swap": "info", "cpu.simd": "pass", "cpu.governor": "pass", "disk.mount": "pass",
        "gpu.driver": "pass", "gpu.cuda": "warn", "gpu.memory": "warn"}
for k, v in want.items():
    assert st[k]["status"] == v, (k, st[k])
assert "Fake CPU" in st["cpu.model"]["observed"], st["cpu.model"]
assert "minor-version" in st["gpu.cuda"]["observed"], st["gpu.cuda"]
assert "2 x NVIDIA H100 80GB HBM3" in st["gpu.memory"]["observed"], st["gpu.memory"]
assert "somaxconn=4096" in st["net.somaxconn"]["fix"], st["net.somaxconn"]
EOF
KEEL_DOCTOR_ROOT="$R" PATH="$B:/usr/bin:/bin" "$KEEL" doctor --fix-script --data-dir "$T/data" > "$T/fake.sh" 2>&1
if sh -n "$T/fake.sh" && grep -q '^sysctl -w net.core.somaxconn=4096$' "$T/fake.sh" && ! grep -q '^sysctl -w vm.swappiness' "$T/fake.sh"; then
  pass doctor_fake_fix_script
else
  fail doctor_fake_fix_script "$(head -c 600 "$T/fake.sh")"
fi
# the fix script was only printed: the fake tree is unchanged
[ "$(cat "$R/proc/sys/net/core/somaxconn")" = 128 ] && pass doctor_changes_nothing || fail doctor_changes_nothing "somaxconn changed"

# runtime without GPU tools on PATH: well under a second. The CPU time the
# doctor itself uses (user + system) is the measure (the wall clock on this
# shared machine swings with its load); the wall clock only has to show that
# nothing hangs.
t0=$(date +%s%N)
cpu=$( { TIMEFORMAT='%3U %3S'; time PATH="$T/emptybin" "$KEEL" doctor --json > /dev/null 2>&1; } 2>&1 )
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
cpu_ms=$(echo "$cpu" | awk '{ printf "%d", ($1 + $2) * 1000 }')
if [ -n "$cpu_ms" ] && [ "$cpu_ms" -lt 500 ] && [ "$ms" -lt 5000 ]; then pass doctor_runtime; else fail doctor_runtime "cpu ${cpu_ms} ms, wall $ms ms"; fi
