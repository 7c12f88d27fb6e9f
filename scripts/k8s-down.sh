#!/usr/bin/env bash
# Tears down what scripts/k8s-up.sh brought up, or what is left of it after
# a kill -9: the pods' containers and sandboxd's own on that containerd, the
# processes, mounts, cgroups, iptables chains and interface it made, the
# sysctls the kubelet set, and its folders. Safe to run when nothing is up.
set -uo pipefail

top=/var/lib/sandboxd-k8s
run=/run/sandboxd-k8s
sock=$run/containerd.sock

stop() { # name: TERM, then KILL what is left after 10 s
	local pidfile=$run/$1.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(cat "$pidfile")
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	rm -f "$pidfile"
}

# The kubelet first, so that nothing restarts the pods while they go.
stop kubelet
if ctr --address "$sock" version >/dev/null 2>&1; then
	for ns in $(ctr --address "$sock" namespaces ls -q); do
		for t in $(ctr --address "$sock" -n "$ns" tasks ls -q); do
			ctr --address "$sock" -n "$ns" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
		done
		for t in $(ctr --address "$sock" -n "$ns" tasks ls -q); do
			for _ in $(seq 1 50); do
				ctr --address "$sock" -n "$ns" tasks delete "$t" >/dev/null 2>&1 && break
				sleep 0.1
			done
		done
		for c in $(ctr --address "$sock" -n "$ns" containers ls -q); do
			ctr --address "$sock" -n "$ns" containers delete "$c" >/dev/null 2>&1
		done
	done
fi
for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$c"; done
# Shims whose containerd went first, and gVisor's sandboxes under them.
pkill -KILL -f "containerd-shim.* -address $sock" 2>/dev/null

# Mounts of the pods, of containerd's snapshots and of the daemons in the
# pods (whose state and run folders are below these), deepest first.
for root in "$top" "$run"; do
	awk -v p="$root" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null
	done
done

# The kubelet's and the daemons' cgroups, children before parents.
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/sandboxd/k8s-*; do
	[[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
done

ip link del sbxk8s0 2>/dev/null

# The kubelet's iptables chains (KUBE-*): the other rules stay as they are.
for save in iptables-save ip6tables-save; do
	restore=${save/-save/-restore}
	if $save 2>/dev/null | grep -q 'KUBE-'; then
		$save | grep -v -- 'KUBE-' | $restore
	fi
done

if [[ -f $top/sysctl.saved ]]; then
	sysctl -q -p "$top/sysctl.saved"
fi
if [[ -f $top/no-var-lib-kubelet ]]; then
	rm -rf /var/lib/kubelet
fi
rm -rf "$top" "$run"
exit 0
