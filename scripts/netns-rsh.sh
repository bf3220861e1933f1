#!/usr/bin/env bash
# A remote shell into the hosts of a simulated cluster (network namespaces on this machine),
# in place of ssh, for launchers that start their daemons through one: Open MPI's mpirun
# with `--mca plm_rsh_agent <this script>` (or OMPI_MCA_plm_rsh_agent).
#
#   netns-rsh.sh [-x] [-T] [-n] [-q] HOST COMMAND...
#
# As ssh does, it runs COMMAND's words, joined by spaces, with sh on HOST (a host name or
# any of its addresses), in an environment like a login's rather than the caller's: PATH,
# HOME, USER, LOGNAME, SHELL, LANG, TMPDIR and LD_LIBRARY_PATH only (and NETNS_RSH_HOSTS,
# so that a daemon it starts can start others in turn: Open MPI's tree spawn). A launcher
# must pass what its processes need (`mpirun -x NAME`). ssh's flags above are accepted and
# mean nothing here. Inside the host the command runs in the host's network namespace
# (`ip netns exec`, which also mounts /etc/netns/<namespace>/hosts on /etc/hosts) under the
# host's own name (a UTS namespace of its own).
#
# NETNS_RSH_HOSTS names the cluster's host map, a line per host:
#   <namespace> <host name> [<address>...]
# oxccl_testkit::cluster writes one for every cluster it makes (Cluster::host_map). Exits
# 255 when it cannot reach the host (as ssh does), else with the command's status. Needs
# root (entering namespaces) and iproute2.
set -euo pipefail

fail() {
  echo "netns-rsh.sh: $*" >&2
  exit 255
}

while [[ ${1:-} == -* ]]; do
  case $1 in
    -x|-T|-n|-q) shift ;;
    *) fail "unknown option '$1' (takes -x, -T, -n, -q, as ssh does, and ignores them)" ;;
  esac
done
(($# >= 2)) || fail "usage: netns-rsh.sh [-x] [-T] [-n] [-q] HOST COMMAND..."
host=$1
shift

map=${NETNS_RSH_HOSTS:-}
[[ -n $map ]] || fail "NETNS_RSH_HOSTS is not set: it names the file mapping host names and addresses to namespaces"
[[ -r $map ]] || fail "cannot read NETNS_RSH_HOSTS=$map"
namespace="" name=""
while read -r line_namespace line_name addresses; do
  for alias in "$line_name" $addresses; do
    if [[ $alias == "$host" ]]; then
      namespace=$line_namespace name=$line_name
    fi
  done
done <"$map"
[[ -n $namespace ]] || fail "no host '$host' in $map (it lists: $(awk '{printf "%s ", $2}' "$map"))"
[[ -e /var/run/netns/$namespace ]] || fail "host '$host' is namespace $namespace, which does not exist (the cluster was deleted?)"

login_environment=()
for variable in PATH HOME USER LOGNAME SHELL LANG TMPDIR LD_LIBRARY_PATH NETNS_RSH_HOSTS; do
  if [[ -n ${!variable:-} ]]; then login_environment+=("$variable=${!variable}"); fi
done

# The host name is set inside the new UTS namespace before the command replaces the shell.
# shellcheck disable=SC2016  # $0 and $1 belong to the inner shell
exec env -i "${login_environment[@]}" ip netns exec "$namespace" unshare --uts \
  sh -c 'echo "$0" > /proc/sys/kernel/hostname && exec sh -c "$1"' "$name" "$*"
