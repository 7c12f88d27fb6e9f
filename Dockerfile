# The sandboxd daemon in a container, driving the host's Docker engine
# through its socket. `make docker-image` builds it offline, from the
# sandboxd/shell image and a static binary; on a host with a registry any
# Debian base works too: --build-arg BASE=debian:bookworm-slim.
#
# The daemon mounts a tmpfs per task under its state folder (CAP_SYS_ADMIN,
# and no AppArmor profile that forbids mount) and the host's engine
# bind-mounts it into the task's container, so the state folder must be the
# same path inside and out, shared both ways:
#
#   mkdir -p /var/lib/sandboxd /run/sandboxd
#   mount --bind /var/lib/sandboxd /var/lib/sandboxd && mount --make-shared /var/lib/sandboxd
#   docker run -d --name sandboxd --cap-add SYS_ADMIN --security-opt apparmor=unconfined \
#     -v /var/run/docker.sock:/var/run/docker.sock \
#     -v /var/lib/sandboxd:/var/lib/sandboxd:rshared \
#     -v /run/sandboxd:/run/sandboxd \
#     -v /sys/fs/cgroup:/host/sys/fs/cgroup:ro \
#     sandboxd/daemon --backend docker
ARG BASE=sandboxd/shell
FROM ${BASE}
USER 0:0
# Root's PATH: the daemon finds the OCI runtimes on it, and a node keeps
# runc in an sbin folder (deploy/kubernetes/daemonset.yaml mounts it).
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY bin/sandboxd-static /usr/local/bin/sandboxd
# The init the daemon binds into every task's container; the daemon copies
# it into its state folder, which the engine's host sees at the same path.
COPY bin/sandboxd-init /usr/local/lib/sandboxd/sandboxd-init
# The lock sits apart from /var/lib/sandboxd, which operators mount over.
COPY bin/images.lock /etc/sandboxd/images.lock
# gVisor, for nodes that have none: on Kubernetes an init container copies
# it to the node (deploy/kubernetes/daemonset.yaml).
COPY bin/runsc /usr/local/lib/sandboxd/runsc
# In a container the daemon drives the host's engine, not OCI runtimes of
# its own; which engine is the caller's to say (--backend docker above; the
# Kubernetes DaemonSet's config file says containerd), and a flag here would
# outrank that file.
ENTRYPOINT ["/usr/local/bin/sandboxd", "serve", "--images-lock", "/etc/sandboxd/images.lock", "--cgroup-root", "/host/sys/fs/cgroup"]
