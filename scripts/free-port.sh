# Sourced by the test-service scripts (pg-test-server.sh, tansu-test-broker.sh,
# redis-test-server.sh): the first loopback port >= $1 nobody listens on,
# trying 100 ports. Needs the caller's `die`.
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
