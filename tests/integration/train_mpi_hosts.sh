#!/usr/bin/env bash
# Data-parallel keel train across two "hosts": two network namespaces joined
# by a veth pair (10.x.y.1 and 10.x.y.2), mpirun started in the first with a
# hostfile, its rsh agent entering the second namespace instead of ssh, MPI
# over TCP on the veth only (--mca btl_tcp_if_include): 4 ranks (2 per host)
# with train.deterministic give the same weights as one process, and rank 0
# (first host) writes the outputs. Needs root (ip netns); the file system is
# shared, as a copied dataset at the same path would be.
. "$KEEL_SRC/tests/integration/lib.sh"
if ! command -v mpirun > /dev/null || ! command -v ip > /dev/null; then
  fail train_mpi_two_hosts "mpirun or ip not found (openmpi-bin, iproute2: mk/packages.txt)"; exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "SKIP train_mpi_two_hosts: network namespaces need root (not counted)"; exit 0; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
A=kla$$; B=klb$$; net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250)); VA=kva$$; VB=kvb$$
cleanup() { ip netns del $A 2> /dev/null; ip netns del $B 2> /dev/null; rm -rf "$T"; }
trap cleanup EXIT
if ! { ip netns add $A && ip netns add $B && ip link add $VA type veth peer name $VB && ip link set $VA netns $A && ip link set $VB netns $B &&
  ip -n $A addr add $net.1/24 dev $VA && ip -n $B addr add $net.2/24 dev $VB &&
  ip -n $A link set lo up && ip -n $B link set lo up && ip -n $A link set $VA up && ip -n $B link set $VB up; } 2> "$T/ns.err"; then
  fail train_mpi_two_hosts "could not make two network namespaces and a veth pair: $(head -c 300 "$T/ns.err")"; exit 0
fi
cat > "$T/rsh" <<SH
#!/bin/sh
# mpirun's rsh agent: "HOST COMMAND..." runs COMMAND in HOST's network namespace
h=\$1; shift
case \$h in $net.1) ns=$A ;; $net.2) ns=$B ;; *) echo "rsh: unknown host \$h" >&2; exit 1 ;; esac
exec ip netns exec \$ns sh -c "\$*"
SH
chmod +x "$T/rsh"
printf '%s slots=2\n' $net.1 $net.2 > "$T/hosts"
D=$T/data
if ! $PYTHON "$KEEL_SRC/examples/digits/prepare.py" "$D" > "$T/prep.log" 2>&1; then
  fail train_mpi_hosts_data "prepare.py failed: $(tail -c 300 "$T/prep.log")"; exit 0
fi
cat > "$T/mlp.yaml" <<YAML
seed: 1
input: {shape: [64]}
layers: [{type: linear, out: 64}, {type: relu}, {type: dropout, p: 0.1}, {type: linear, out: 10}]
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.003}
train: {epochs: 2, batch_size: 64, val_fraction: 0.1, deterministic: true}
data: {x: $D/x_train.npy, y: $D/y_train.npy}
YAML
$KEEL train "$T/mlp.yaml" --out "$T/one" --quiet --no-track > "$T/one.log" 2>&1
timeout 120 ip netns exec $A mpirun --oversubscribe --bind-to none --hostfile "$T/hosts" -np 4 --mca plm_rsh_agent "$T/rsh" \
  --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 \
  $KEEL train "$T/mlp.yaml" --out "$T/two" --quiet --no-track > "$T/two.log" 2>&1
rc=$?
h1=$(sha256sum "$T/one/model.safetensors" 2> /dev/null | cut -c1-64); h2=$(sha256sum "$T/two/model.safetensors" 2> /dev/null | cut -c1-64)
if [ $rc -eq 0 ] && [ -n "$h1" ] && [ "$h1" = "$h2" ] && grep -q "^rank 3 of 4:" "$T/two.log"; then pass train_mpi_two_hosts_deterministic;
else fail train_mpi_two_hosts_deterministic "exit $rc, ${h2:-no model} vs ${h1:-no model}: $(tail -c 300 "$T/two.log")"; fi

# keel doctor --hostfile: the first host is local, the second answers no ssh (no sshd in its namespace)
ip netns exec $A $KEEL doctor --hostfile "$T/hosts" --json > "$T/doc.json" 2> "$T/doc.err"
rc=$?
if [ $rc -eq 1 ] && $PYTHON -c "
import json, sys
c = [c for c in json.load(open('$T/doc.json'))['checks'] if c['id'] == 'train.hostfile'][0]
assert c['status'] == 'fail' and '$net.2: ssh port closed' in c['observed'] and '$net.1' not in c['observed'], c
" 2> "$T/doc.py"; then pass train_mpi_doctor_hostfile; else fail train_mpi_doctor_hostfile "exit $rc: $(tail -c 300 "$T/doc.py") $(head -c 200 "$T/doc.err")"; fi
printf 'localhost slots=two\n' > "$T/bad_hosts"
$KEEL doctor --hostfile "$T/bad_hosts" > /dev/null 2> "$T/bad.err"
if grep -q "bad_hosts:1: not an MPI hostfile line" "$T/bad.err"; then pass train_mpi_doctor_bad_hostfile; else fail train_mpi_doctor_bad_hostfile "$(head -c 300 "$T/bad.err")"; fi
