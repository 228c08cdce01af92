# Sourced by the test-service scripts (pg-test-server.sh, tansu-test-broker.sh,
# redis-test-server.sh); needs the caller's `die`.

# The first loopback port >= $1 nobody listens on, trying 100 ports.
free_port_from() {
    local p="${1:?free_port_from PORT}" last
    last=$((p + 100))
    while ((p <= last)); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
        p=$((p + 1))
    done
    die "no free port in $1..$last"
}

# apt-get install PACKAGE (as root), keeping the package from starting a
# server of its own (the Debian policy-rc.d hook); its output to stderr.
apt_install_no_start() {
    local pkg="${1:?apt_install_no_start PACKAGE}" policy=/usr/sbin/policy-rc.d added="" rc=0
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        added=1
    fi
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "$pkg"; } >&2 || rc=$?
    [[ -n "$added" ]] && rm -f "$policy"
    ((rc == 0)) || die "apt-get install $pkg failed ($rc)"
}
