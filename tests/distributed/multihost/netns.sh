# Sourced (bash): two "hosts" on one machine, network namespaces joined by a veth pair, and the
# mpirun command line that starts one rank on each over TCP (OpenMPI's rsh agent set to
# `ip netns exec`). Used by the multihost test and by benchmarks/dp_network.
#
#   netns_up MPIEXEC || exit 77     sets two_hosts=(mpirun ... -np 2 ...), h1 h2 v1 v2 net dir;
#                                   returns 1 where network namespaces are not allowed
#   netns_limit RATE                limits each direction of the link (tc tbf), e.g. 1gbit
#   netns_down                      (installed as the EXIT trap by netns_up)
netns_down() {
  pkill -f "$dir/agent.sh" 2>/dev/null
  for h in "$h1" "$h2"; do
    # Whatever still runs in a namespace (an orphaned OpenMPI daemon) goes with it.
    for pid in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$h" 2>/dev/null
  done
  rm -rf "$dir"
}

netns_up() {
  local mpiexec=$1 tag="loom$$"
  h1="${tag}a" h2="${tag}b" v1="${tag}x" v2="${tag}y"
  net=10.231.$(( $$ % 250 + 1 ))
  dir=$(mktemp -d)
  trap netns_down EXIT
  ip netns add "$h1" 2>/dev/null || return 1
  ip netns add "$h2"
  ip link add "$v1" type veth peer name "$v2"
  ip link set "$v1" netns "$h1"
  ip link set "$v2" netns "$h2"
  ip netns exec "$h1" ip addr add "$net.1/24" dev "$v1"
  ip netns exec "$h2" ip addr add "$net.2/24" dev "$v2"
  local pair
  for pair in "$h1:$v1" "$h2:$v2"; do
    ip netns exec "${pair%%:*}" ip link set lo up
    ip netns exec "${pair%%:*}" ip link set "${pair#*:}" up
  done
  # OpenMPI runs "agent HOST COMMAND..." to start its daemon on HOST: here, in HOST's namespace.
  cat >"$dir/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
  $net.1) ns=$h1 ;;
  $net.2) ns=$h2 ;;
  *) echo "agent.sh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
  chmod +x "$dir/agent.sh"
  printf '%s slots=1\n%s slots=1\n' "$net.1" "$net.2" >"$dir/hosts"
  local root=()
  [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  # mpirun, started on the first host, with one rank on each
  two_hosts=(ip netns exec "$h1" "$mpiexec" "${root[@]}" -np 2 --hostfile "$dir/hosts" --map-by node --bind-to none
    --mca plm_rsh_agent "$dir/agent.sh" --mca oob_tcp_if_include "$net.0/24"
    --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24")
}

# The bucket holds 512 KB: the least that reaches the rate with this kernel's 250 Hz timer (rate / HZ);
# a larger one would let part of every transfer after an idle gap go at memory speed.
netns_limit() {
  local pair
  for pair in "$h1:$v1" "$h2:$v2"; do
    ip netns exec "${pair%%:*}" tc qdisc replace dev "${pair#*:}" root tbf rate "$1" burst 512kb latency 20ms
  done
}
